"""The instructor's side: write the student notebooks, grade a class's submissions in a sandbox,
keep the gradebook, export it.

- :mod:`.assign`: exercise notebooks from the solution notebooks
- :mod:`.collect`: an LMS download -> ``SUBMISSIONS/<login>/<NN_slug>.ipynb`` and a manifest
  (:mod:`.lms_downloads`, :mod:`.lms_layouts`, :mod:`.roster_match`); :mod:`.ungraded`: the
  files that are no submission, recorded
- :mod:`.notebook`: reading a submitted notebook's bytes (size, UTF-8, JSON, nbformat)
- :mod:`.skip_demos`: the ``with when_implemented():`` demo blocks that grading leaves out
- :mod:`.autograde`: one submission -> one :class:`~.record.Record`
- :mod:`.record`: the record (raw score, late penalty, final score) and its JSON
- :mod:`.untrusted_text`: text from a submission made safe to store, show and export
- :mod:`.config`: :class:`~.config.GradeConfig`, how a class is graded
- :mod:`.batch`: a class's folder -> the gradebook: discover, skip, grade, record
- :mod:`.backends`: where notebooks are graded: this process, :mod:`.pool` or :mod:`.cluster` (Dask)
- :mod:`.deadlines`: late penalties and submission times
- :mod:`.gradebook`: the SQLite gradebook
- :mod:`.identity`: who a student is (folder names, roster logins, LMS ids compared alike)
- :mod:`.exports`: CSV, Canvas, a wide table, Gradescope results and feedback reports
- :mod:`.gradescope`: Gradescope's autograder bundle; :mod:`.gradescope_run`: what it runs there
- :mod:`.lookalike`: look-alike submissions (winnowed fingerprints of the graded functions),
  :mod:`.lookalike_regions` (matched lines, provided text), :mod:`.compared` (what is compared:
  a graded function and the notebook's own helpers it reaches)
- :mod:`.class_report`: the class report (scores, mistakes, items, look-alikes, answers)
- :mod:`.sandbox`: running student code isolated, and the wire protocol to it (it knows no rubric)
- :mod:`.sandbox_adapter`: what the sandbox needs from the rules (watch lists, the stand-in
  hook) and its replies as grading's outcomes; :mod:`.standin_calls`: bounded reference calls
- :mod:`.cli`: the instructor's ``course-lib`` subcommands

Notebooks never import this package: their checks are :mod:`course_lib.grading`.
"""
