"""Parse INI-like text: [section] headers, key = value lines and # comments."""


def parse(text):
    """A dict of sections, each a dict of keys to values; keys before any section header
    go in the section "" ."""
    config = {"": {}}
    section = ""
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            section = stripped[1:-1].strip()
            config.setdefault(section, {})
            continue
        parts = line.split("=")
        key, value = parts[0], parts[1]
        config[section][key.strip()] = value.strip()
    return config
