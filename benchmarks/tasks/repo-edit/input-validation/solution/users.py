"""User records."""

from dataclasses import dataclass


@dataclass
class User:
    name: str
    age: int
    email: str


def create_user(name, age, email):
    """A new User; the name is stripped of surrounding whitespace."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError("name must not be empty")
    if isinstance(age, bool) or not isinstance(age, int) or not 0 <= age <= 150:
        raise ValueError(f"age must be an integer from 0 to 150, not {age!r}")
    local, at, domain = email.partition("@") if isinstance(email, str) else ("", "", "")
    if not at or not local or not domain or "@" in domain:
        raise ValueError(f"email is not valid: {email!r}")
    return User(name=name.strip(), age=age, email=email)
