"""Text shown to people: terminal-safe rendering and log following."""
