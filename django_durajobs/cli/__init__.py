"""The operator's terminal: ``manage.py jobs`` and ``manage.py prunejobs``.

Glue over the operations, ``describe()`` and the store, like the admin: the commands parse
arguments (``arguments``), call the same functions a program would, and print what they return
(``output``: tables and progress bars with rich when it is installed, plain text otherwise).
"""
