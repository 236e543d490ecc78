"""gym environment ``multi_step``: look up synonym values with tools, then submit them in order."""
