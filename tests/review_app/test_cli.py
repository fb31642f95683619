"""``course-lib review`` on the command line: a missing gradebook is refused, a real one served."""

from __future__ import annotations

import http.cookiejar
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from conftest import ROOT
from review_fixtures import class_gradebook

from course_lib.cli import main


def test_review_refuses_a_missing_gradebook_naming_it(tmp_path, capsys):
    assert main(["review", "--db", str(tmp_path / "none.sqlite")]) == 2
    assert f"course-lib review: no gradebook at {tmp_path / 'none.sqlite'}" in capsys.readouterr().err
    assert not (tmp_path / "none.sqlite").exists()


def test_review_refuses_a_port_out_of_range(tmp_path, capsys):
    db = class_gradebook(tmp_path / "g.sqlite")
    assert main(["review", "--db", str(db), "--port", "70000"]) == 2
    assert "--port: expected 0 to 65535, got 70000" in capsys.readouterr().err


def test_review_refuses_a_port_in_use_and_an_empty_grader_name(tmp_path, capsys):
    db = class_gradebook(tmp_path / "g.sqlite")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["review", "--db", str(db), "--port", str(port)]) == 2
    assert f"--port: cannot listen on 127.0.0.1:{port} (Address already in use)" in capsys.readouterr().err
    assert main(["review", "--db", str(db), "--grader", " "]) == 2
    assert "--grader: grader: expected a name, got ' '" in capsys.readouterr().err


def test_review_prints_a_url_with_its_token_and_serves_it_until_interrupted(tmp_path):
    db = class_gradebook(tmp_path / "g.sqlite")
    command = [sys.executable, "-m", "course_lib", "review", "--db", str(db), "--grader", "prof"]
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            assert "as 'prof'" in proc.stdout.readline()
            url = proc.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:") and "/?token=" in url
            browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
            with browser.open(url, timeout=10) as page:  # the token becomes a cookie, the redirect keeps it
                assert page.status == 200 and "token" not in page.url
                assert "Answers to grade" in page.read().decode()
            with pytest.raises(urllib.error.HTTPError, match="403"):
                urllib.request.urlopen(url.split("?")[0], timeout=10)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=10)
    assert proc.returncode == 0
