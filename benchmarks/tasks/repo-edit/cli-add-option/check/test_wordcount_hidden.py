import subprocess
import sys

import wordcount

TEXT = "The cat saw the dog\nthe END end\n"


def run(tmp_path, *args):
    path = tmp_path / "words.txt"
    path.write_text(TEXT, encoding="utf-8")
    proc = subprocess.run([sys.executable, "wordcount.py", *args, str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_plain_count_unchanged(tmp_path):
    assert run(tmp_path) == "8"


def test_unique_count(tmp_path):
    assert run(tmp_path, "--unique") == "5"


def test_unique_through_main(tmp_path, capsys):
    path = tmp_path / "w.txt"
    path.write_text("a A b\n", encoding="utf-8")
    assert wordcount.main(["--unique", str(path)]) == 0
    assert capsys.readouterr().out.strip() == "2"


def test_help_mentions_unique():
    proc = subprocess.run([sys.executable, "wordcount.py", "--help"], capture_output=True,
                          text=True, timeout=60)
    assert "--unique" in proc.stdout
