"""The ``pomo`` command line."""
