"""The command line: ``ollie demo|derive|bench|repl|cache|tune``."""
from ollie.cli.main import main  # noqa: F401
