"""Tools and the world they act on: function tools, the workspace, file, search and shell tools."""
