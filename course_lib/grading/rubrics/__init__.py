"""The rubrics: how each graded function is checked, one module per assignment (``chNN.py`` for
``exercises/NN_*.ipynb``; shared helpers in ``_common.py``).

Each module defines ``EXERCISES``: a list of :class:`course_lib.grading.Exercise` (the cases,
the named mistakes and the forbidden calls of one graded function). The table in
:mod:`course_lib.assignments` names each assignment's module; :mod:`course_lib.grading.registry`
imports it.
"""
