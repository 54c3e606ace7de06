"""The recording file format: its lines, its JSON values, the loop and extras parts.
Imports the model only."""
