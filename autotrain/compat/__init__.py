"""The private names of other libraries that autotrain still needs: one module per library.

Everything else uses the libraries' public APIs. Where a private attribute or function is the only way, it
is wrapped here, once, in a function that says why; tests/test_compat.py checks each against the installed
release (a rename fails there, by name, not somewhere in a training run), and tests/test_private_names.py
fails on a private name of another library used anywhere else in the package. The versions each module was
checked on are in its docstring; `.ci/floors` runs the same tests at the floors and at the newest releases.

The bottom of the package: a compat module imports nothing of autotrain, and only its own library.
"""
