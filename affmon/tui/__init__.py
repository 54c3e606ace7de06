"""The Textual app: a thin shell over ``affmon.core.monitor`` views. Imported only when
``affmon`` opens the TUI, so the other commands never load Textual."""
