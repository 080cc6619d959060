"""User records."""

from dataclasses import dataclass


@dataclass
class User:
    name: str
    age: int
    email: str


def create_user(name, age, email):
    """A new User; the name is stripped of surrounding whitespace."""
    return User(name=name.strip(), age=age, email=email)
