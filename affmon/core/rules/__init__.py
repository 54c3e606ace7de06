"""What is wrong, in numbers: the finding and its thresholds (``base``), the rules by
concept (``cpu``, ``gpu``, ``memory``, ``threads``, ``loop``), one ``evaluate`` that runs every
rule and sorts once, the debouncing tracker, and the one ``tick`` every front end loops over.
Imports the model."""
