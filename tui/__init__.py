"""The `gpu` command line and the Textual dashboard: a thin front over `core`."""
