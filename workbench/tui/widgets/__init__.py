"""One widget per module, named by its role on screen."""
