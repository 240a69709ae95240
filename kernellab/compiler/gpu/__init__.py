"""GPU IR: distributed layouts, the analyses that choose them, and their text form."""
