"""``course-lib review``: a local web app where graders act on what the autograder leaves to people.

The app (Flask) serves one gradebook on 127.0.0.1 behind a random token (:mod:`.security`):

- ``answers`` (:mod:`.answers`): per assignment its "think about it" questions; per question its
  text, a rubric the graders edit, and the students' answers in groups (identical and
  near-identical answers graded once), each decision saved at once to the gradebook's manual
  grading store (:mod:`course_lib.autograder.manual`) with who and when;
- ``held`` and ``pairs``: the records held for review and the look-alike pairs.

:func:`create_app` makes the app, :func:`serve` runs it in a thread (the command line and the
tests), ``docs/review-app.md`` says how to run it and what the token protects.
"""

from __future__ import annotations

from .app import create_app
from .context import gradebook
from .server import ReviewServer, serve

__all__ = ["create_app", "gradebook", "serve", "ReviewServer"]
