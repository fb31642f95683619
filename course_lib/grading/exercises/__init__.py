"""Exercise definitions, one module per assignment (``chNN.py`` for ``exercises/NN_*.ipynb``).

Each module defines ``EXERCISES``: a list of :class:`course_lib.grading.Exercise`.
"""
