"""One module per CLI command. Modules import only the standard library and typer at
import time; heavy libraries are imported inside the command functions."""
