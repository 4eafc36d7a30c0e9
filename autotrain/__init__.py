"""autotrain: fine-tune LLMs, text and image classifiers from one checked YAML file.

Importing the package is cheap on purpose: nothing here pulls in torch, so the CLI starts instantly.
"""

__version__ = "0.1.0"
