import pytest
from users import User, create_user


def test_valid_user():
    assert create_user("  Ada ", 36, "ada@example.com") == User("Ada", 36, "ada@example.com")
    assert create_user("Bo", 0, "b@x").age == 0
    assert create_user("Cy", 150, "c@y").age == 150


@pytest.mark.parametrize("name", ["", "   ", "\t\n"])
def test_empty_name(name):
    with pytest.raises(ValueError, match="name"):
        create_user(name, 30, "a@b.c")


@pytest.mark.parametrize("age", [-1, 151, 30.5, "30", None])
def test_bad_age(age):
    with pytest.raises(ValueError, match="age"):
        create_user("Ann", age, "a@b.c")


@pytest.mark.parametrize("email", ["", "ann", "@b.c", "ann@", "a@b@c"])
def test_bad_email(email):
    with pytest.raises(ValueError, match="email"):
        create_user("Ann", 30, email)
