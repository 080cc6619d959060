"""A tiny text buffer for an editor."""


class TextBuffer:
    def __init__(self, text=""):
        self.text = text
        self._history = []

    def append(self, more):
        """Add ``more`` at the end."""
        self._history.append(self.text)
        self.text += more

    def delete(self, n):
        """Remove the last ``n`` characters (all of them when there are fewer)."""
        if n < 0:
            raise ValueError("n must not be negative")
        self._history.append(self.text)
        self.text = self.text[:max(0, len(self.text) - n)]

    def undo(self):
        """Undo the most recent append() or delete(); IndexError when there is none."""
        if not self._history:
            raise IndexError("nothing to undo")
        self.text = self._history.pop()

    def clear(self):
        self.text = ""
        self._history.clear()

    def __len__(self):
        return len(self.text)
