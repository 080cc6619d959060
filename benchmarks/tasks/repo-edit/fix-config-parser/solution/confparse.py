"""Parse INI-like text: [section] headers, key = value lines and # comments."""


def parse(text):
    """A dict of sections, each a dict of keys to values; keys before any section header
    go in the section "" ."""
    config = {"": {}}
    section = ""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("[") and stripped.endswith("]"):
            section = stripped[1:-1].strip()
            config.setdefault(section, {})
            continue
        if "=" not in line:
            raise ValueError(f"line {number}: expected key = value, got {stripped!r}")
        key, value = line.split("=", 1)
        config[section][key.strip()] = value.strip()
    return config
