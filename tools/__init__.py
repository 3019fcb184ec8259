"""Developer tools: the fleet simulator and the local server. Not deployed (.funcignore)."""
