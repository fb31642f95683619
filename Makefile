# Two commands do all set-up on a fresh machine (see README.md):
#   make book   build the executed book into _build/html
#   make test   run the whole test suite
# Both create .venv and install the pinned environment when needed, and skip that when
# it is already up to date. For working on the code:
#   make test-fast   library, checks and autograder tests without the sandbox, the book or a browser
#   make lint        ruff (lint and format check) and mypy on course_lib
#   make fmt         ruff's fixes and formatting, in place
#   make bench       the benchmarks in benchmarks/ (they print numbers)

PYTHON   ?= python3
VENV     := .venv
BIN      := $(VENV)/bin
STAMP    := $(VENV)/.installed
# Debian packages the tests need, installed when missing: chromium for the browser test of
# the book (Playwright's own browser download is not allowed here), bubblewrap for the
# autograder's sandbox.
SYSDEPS  := /usr/bin/chromium /usr/bin/bwrap
SUDO     := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
NBVAL    := -p no:cacheprovider --nbval-current-env

.PHONY: book test test-fast lint fmt bench env constraints clean sysdeps pdf

env: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

# Chapters are executed once and cached (_build/.jupyter_cache, keyed on each chapter's own
# text). They also run code from course_lib's model modules and book/*.py, so a change there
# empties the cache: every number and figure in the book comes from the code as it is now.
# Chapters missing from the cache are executed two at a time first (book/_ext/execute_parallel.py);
# the strict build then finds them all there. After a code change every page is rebuilt
# (--all, until one build succeeds): Sphinx re-reads only pages whose own sources changed, and
# would keep the old outputs of a chapter whose text did not.
BOOK_CODE := $(sort $(wildcard course_lib/*.py book/*.py))

book: $(STAMP)
	@mkdir -p _build; hash=$$(cat $(BOOK_CODE) | sha256sum | cut -c1-16); \
	  if [ "$$(cat _build/.book-code 2>/dev/null)" != "$$hash" ]; then \
	    rm -rf _build/.jupyter_cache; touch _build/.book-stale; echo "$$hash" > _build/.book-code; fi
	$(BIN)/python book/_ext/execute_parallel.py --jobs 2
	$(BIN)/jupyter-book build . --builder html -W -n --keep-going $$([ -e _build/.book-stale ] && echo --all)
	@rm -f _build/.book-stale
	@echo "The book is at $(CURDIR)/_build/html/index.html"

# A PDF of the whole book, offline: the book as one HTML page (strict, chapters from the
# execution cache that `make book` keeps up to date), printed by headless Debian chromium
# once MathJax has typeset every equation (book/_ext/print_pdf.py: a contents page,
# bookmarks, page numbers). Writes _build/pdf/book.pdf; running it again rewrites the same.
pdf: $(STAMP) sysdeps book
	$(BIN)/jupyter-book build . --builder singlehtml -W -n --keep-going
	$(BIN)/python book/_ext/print_pdf.py _build/singlehtml _build/pdf/book.pdf

sysdeps:
	@test -x /usr/bin/chromium && test -x /usr/bin/bwrap || { \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends chromium bubblewrap; }

# The suite includes the browser test of the built book, so the book is built first
# (strictly; unchanged chapters come from the execution cache), and the code must pass
# `make lint`. Then two streams run side by side, one per core:
#   - the tests marked serial (all of tests/autograder, and any other test that starts a
#     grading runner), one after another: they start runners under one uid, and some count
#     that uid's processes and memory cgroups machine-wide, so no other runner may run beside
#     them; their output goes to _build/test-serial.log and is printed at the end;
#   - every other test, then the notebooks: solutions must reproduce their stored outputs,
#     blank exercises must run without errors.
# The target fails if either stream fails.
SERIAL_LOG := _build/test-serial.log

test: $(STAMP) sysdeps lint book
	@{ $(BIN)/python -m pytest -p no:cacheprovider -m serial > $(SERIAL_LOG) 2>&1; echo $$? > $(SERIAL_LOG).rc; } & \
	  $(BIN)/python -m pytest -m "not serial" \
	  && $(BIN)/python -m pytest $(NBVAL) --nbval --nbval-sanitize-with nbval_sanitize.cfg solutions/ \
	  && $(BIN)/python -m pytest $(NBVAL) --nbval-lax exercises/; rc=$$?; \
	  wait; echo "=== the serial tests (run beside the above; $(SERIAL_LOG)) ==="; cat $(SERIAL_LOG); \
	  test $$rc = 0 && test "$$(cat $(SERIAL_LOG).rc)" = 0

# The quick loop while editing: the library, the checks and the autograder without the sandbox
# (no book, no browser), and no test marked slow (pyproject.toml lists the markers).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not sandbox" tests/lib tests/grading tests/autograder

# ruff covers every Python file and notebook of the repository (pyproject.toml says how).
lint: $(STAMP)
	$(BIN)/ruff check
	$(BIN)/ruff format --check
	$(BIN)/mypy

# The student notebooks are regenerated from the formatted solutions, not formatted themselves.
fmt: $(STAMP)
	$(BIN)/ruff check --fix --extend-exclude exercises
	$(BIN)/ruff format --extend-exclude exercises
	$(BIN)/course-lib assign

# Benchmarks print numbers (no timed tests): attention speed vs PyTorch, training to the
# accuracy targets and reproducibility, KV-cache decoding, tiled-attention memory, and
# grading 200 submissions against an nbgrader-style baseline, the class report of 1,000 students,
# the review app on one question answered by 1,000 students.
bench: $(STAMP) sysdeps
	$(BIN)/python benchmarks/attention_vs_torch.py
	$(BIN)/python benchmarks/models.py
	$(BIN)/python -m course_lib.memory_probe
	$(BIN)/python benchmarks/grading.py
	$(BIN)/python benchmarks/report.py
	$(BIN)/python benchmarks/review_app.py
	$(BIN)/python benchmarks/review_index.py
	$(BIN)/python benchmarks/manual_store.py
	$(BIN)/python benchmarks/answer_groups.py
	$(BIN)/python benchmarks/render_answers.py

# Regenerate constraints.txt from the current environment (after changing dependencies).
constraints: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable | sed 's/^torch==2.13.0+cpu$$/torch==2.13.0/' > constraints.txt

clean:
	rm -rf _build artifacts .hypothesis .mypy_cache .ruff_cache .pytest_cache
	find course_lib tests benchmarks book -name __pycache__ -type d -prune -exec rm -rf {} +
