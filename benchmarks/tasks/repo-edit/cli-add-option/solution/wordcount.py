"""Count the words of a text file: python wordcount.py [--unique] FILE"""

import argparse
import sys


def words(text):
    """The words of ``text``: runs of characters between whitespace."""
    return text.split()


def main(argv=None):
    parser = argparse.ArgumentParser(description="Count the words of a text file.")
    parser.add_argument("file", help="the file to read")
    parser.add_argument("--unique", action="store_true",
                        help="count distinct words, case-insensitively")
    args = parser.parse_args(argv)
    with open(args.file, encoding="utf-8") as f:
        text = f.read()
    found = words(text)
    if args.unique:
        print(len({w.lower() for w in found}))
    else:
        print(len(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
