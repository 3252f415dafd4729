"""Reports: terminal tables today; HTML and plots build on the same rows."""
