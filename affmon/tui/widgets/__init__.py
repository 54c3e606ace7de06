"""The app's panes. Each renders the values it is given (attributes down) and says
nothing back except through Textual's own messages (row highlighted, clicked)."""
