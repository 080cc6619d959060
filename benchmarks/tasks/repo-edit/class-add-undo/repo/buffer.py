"""A tiny text buffer for an editor."""


class TextBuffer:
    def __init__(self, text=""):
        self.text = text

    def append(self, more):
        """Add ``more`` at the end."""
        self.text += more

    def delete(self, n):
        """Remove the last ``n`` characters (all of them when there are fewer)."""
        if n < 0:
            raise ValueError("n must not be negative")
        self.text = self.text[:max(0, len(self.text) - n)]

    def clear(self):
        self.text = ""

    def __len__(self):
        return len(self.text)
