"""The Textual app: a thin shell over ``affmon.tui.model.monitor`` views. Imported only when
``affmon`` opens the TUI, so the other commands never load Textual."""
