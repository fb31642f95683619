"""Gradescope's autograder bundle: ``course-lib export --format gradescope-autograder``.

Gradescope runs an instructor's autograder in a container of its own (its autograder
specification, ``gradescope/autograder_samples``, ``docs/specs.md``): it unzips the uploaded
``autograder.zip`` into ``/autograder/source``, runs ``setup.sh`` once when it builds the image,
then, for each submission, puts the student's files in ``/autograder/submission``, runs
``run_autograder`` from ``/autograder`` and reads ``/autograder/results/results.json``.

:func:`build_bundle` writes that zip:

* ``setup.sh``: installs bubblewrap (the sandbox) and, when the image has no Python 3.11 or
  newer, Python 3.11 with apt; makes a virtual environment (Gradescope's own harness runs on
  the image's ``python3``, which is left alone); installs the CPU wheel of torch from PyTorch's
  index, then the ``course_lib`` wheel the zip holds, with the versions of ``constraints.txt``;
* ``run_autograder``: grades the one notebook of the submission with the same checks and
  sandbox as ``course-lib grade`` (:mod:`.gradescope_run`) and writes ``results.json``; if
  Python cannot even start, a ``results.json`` that says so;
* :data:`CONFIG_NAME`: the assignment, the visibility, the seed, the sandbox setting and the
  limits (a :class:`BundleConfig`);
* ``constraints.txt`` and ``course_lib-VERSION-py3-none-any.whl``, built from this checkout
  with ``pip wheel --no-deps --no-build-isolation`` (no download).

Every path in both scripts hangs off ``AUTOGRADER_ROOT`` (default ``/autograder``) and the
environment is ``AUTOGRADER_VENV`` (default ``$AUTOGRADER_ROOT/venv``), so a test can play
Gradescope's layout in a temporary folder.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..grading.registry import ASSIGNMENTS
from .exports import GRADESCOPE_VISIBILITY
from .sandbox import Limits

__all__ = ["BundleConfig", "BundleError", "build_bundle", "build_wheel", "CONFIG_NAME", "SETUP_SH", "RUN_AUTOGRADER"]

#: The bundle's configuration file, in ``/autograder/source``.
CONFIG_NAME = "course_lib_autograder.json"
#: The sandbox settings a bundle accepts (as ``course-lib grade --sandbox``).
SANDBOX_MODES = ("auto", "required", "off")


class BundleError(ValueError):
    """A bundle that cannot be built: a bad option, or no checkout to build the wheel from."""


@dataclass(frozen=True)
class BundleConfig:
    """What ``run_autograder`` does with a submission.

    Args:
        assignment: the assignment graded (``02_self_attention``); None: found from the
            notebook (its name without ``Copy of``, ``(1)`` and the like, its metadata, or the
            graded functions it defines).
        visibility: of the results and every test: ``visible``, ``after_due_date``,
            ``after_published`` or ``hidden``.
        seed: draw every test input anew from this seed; None: the self-check's inputs.
        sandbox: ``auto``, ``required`` (no grading without bubblewrap or namespaces: a
            ``results.json`` that says so) or ``off``.
        limits: each submission's time and memory limits.

    Raises:
        BundleError: an unknown assignment, visibility or sandbox setting, or a seed that is
            not an int.
    """

    assignment: str | None = None
    visibility: str = "visible"
    seed: int | None = None
    sandbox: str = "auto"
    limits: Limits = field(default_factory=Limits)

    def __post_init__(self) -> None:
        if self.assignment is not None and self.assignment not in ASSIGNMENTS:
            raise BundleError(f"--assignment: expected one of {', '.join(ASSIGNMENTS)}, got {self.assignment!r}")
        if self.visibility not in GRADESCOPE_VISIBILITY:
            raise BundleError(
                f"--visibility: expected one of {', '.join(GRADESCOPE_VISIBILITY)}, got {self.visibility!r}"
            )
        if self.sandbox not in SANDBOX_MODES:
            raise BundleError(f"--sandbox: expected one of {', '.join(SANDBOX_MODES)}, got {self.sandbox!r}")
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool)):
            raise BundleError(f"--seed: expected an int, got {type(self.seed).__name__}")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "limits": asdict(self.limits)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BundleConfig:
        return cls(**{**data, "limits": Limits(**data.get("limits", {}))})


SETUP_SH = r"""#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (made by
# course-lib export --format gradescope-autograder).
set -euo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
SRC="$ROOT/source"
VENV="${AUTOGRADER_VENV:-$ROOT/venv}"
export DEBIAN_FRONTEND=noninteractive

apt-get update
apt-get install -y --no-install-recommends bubblewrap

if [ ! -x "$VENV/bin/python" ]; then
    PYTHON=""
    for candidate in python3.13 python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null \
            && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
            PYTHON="$candidate"
            break
        fi
    done
    if [ -z "$PYTHON" ]; then  # Ubuntu 22.04's python3 is 3.10
        apt-get install -y --no-install-recommends software-properties-common
        add-apt-repository -y ppa:deadsnakes/ppa
        apt-get update
        apt-get install -y --no-install-recommends python3.11 python3.11-venv
        PYTHON=python3.11
    fi
    apt-get install -y --no-install-recommends "$(basename "$PYTHON")-venv" || true
    "$PYTHON" -m venv "$VENV"  # Gradescope's harness runs on the image's python3: left alone
fi

PY="$VENV/bin/python"
"$PY" -m pip install --index-url https://download.pytorch.org/whl/cpu -c "$SRC/constraints.txt" torch==2.13.0
"$PY" -m pip install -c "$SRC/constraints.txt" "$SRC"/course_lib-*.whl
# the bundled course_lib always wins, even over an install of the same version number
"$PY" -m pip install --no-deps --force-reinstall "$SRC"/course_lib-*.whl
"$PY" -c 'import course_lib.autograder.gradescope_run'
"""

RUN_AUTOGRADER = r"""#!/usr/bin/env bash
# Gradescope runs this for each submission (made by course-lib export --format gradescope-autograder).
ROOT="${AUTOGRADER_ROOT:-/autograder}"
VENV="${AUTOGRADER_VENV:-$ROOT/venv}"
cd "$ROOT" || exit 1
"$VENV/bin/python" -m course_lib.autograder.gradescope_run --root "$ROOT"
code=$?
if [ "$code" -ne 0 ] && [ ! -s "$ROOT/results/results.json" ]; then
    mkdir -p "$ROOT/results"
    printf '%s\n' '{"score": 0, "output": "The autograder could not start (exit status '"$code"'; did setup.sh fail?). Your instructor can see why in the autograder output.", "output_format": "text", "stdout_visibility": "hidden", "tests": []}' > "$ROOT/results/results.json"
fi
exit 0
"""


def _source_root() -> Path:
    """The checkout ``course_lib`` is imported from (``pyproject.toml`` next to ``course_lib/``)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file() or not (root / "course_lib").is_dir():
        raise BundleError(
            "--format gradescope-autograder: expected a checkout of the course's repository (pyproject.toml "
            f"next to course_lib/) to build the course_lib wheel from, got none at {root}"
        )
    return root


def build_wheel(dest: Path) -> Path:
    """The ``course_lib`` wheel, built from a copy of this checkout's package files (nothing is
    written into the checkout) with ``pip wheel --no-deps --no-build-isolation --no-index``."""
    root = _source_root()
    with tempfile.TemporaryDirectory(prefix="course-lib-wheel-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (root / name).is_file():
                shutil.copy2(root / name, src / name)
        shutil.copytree(root / "course_lib", src / "course_lib", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
        out = subprocess.run([*cmd, "-w", str(dest), str(src)], capture_output=True, text=True)
        if out.returncode != 0:
            raise BundleError(f"building the course_lib wheel failed: {(out.stderr or out.stdout).strip()[-500:]}")
    wheels = sorted(dest.glob("course_lib-*.whl"))
    if len(wheels) != 1:
        raise BundleError(f"building the course_lib wheel: expected one wheel in {dest}, got {len(wheels)}")
    return wheels[0]


def _add(zf: zipfile.ZipFile, name: str, data: bytes, executable: bool = False) -> None:
    info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = (0o100755 if executable else 0o100644) << 16
    zf.writestr(info, data)


def build_bundle(out: str | Path, config: BundleConfig) -> list[str]:
    """Write Gradescope's ``autograder.zip`` to ``out``: ``setup.sh`` and ``run_autograder`` at
    the root of the archive (as Gradescope requires), the configuration, ``constraints.txt`` and
    the ``course_lib`` wheel. Returns the names in the archive."""
    root = _source_root()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="course-lib-bundle-") as tmp:
        wheel = build_wheel(Path(tmp))
        with zipfile.ZipFile(out, "w") as zf:
            _add(zf, "setup.sh", SETUP_SH.encode(), executable=True)
            _add(zf, "run_autograder", RUN_AUTOGRADER.encode(), executable=True)
            _add(zf, CONFIG_NAME, (json.dumps(config.to_json(), indent=1) + "\n").encode())
            _add(zf, "constraints.txt", (root / "constraints.txt").read_bytes())
            _add(zf, wheel.name, wheel.read_bytes())
            return zf.namelist()
