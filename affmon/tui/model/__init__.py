"""The monitor's model, pure: the history and each pane's values (``monitor``), the rows the
widgets show (``views``) and the process table's order (``table``). No Textual here: the
tests build and check every view from a recording without a screen."""
