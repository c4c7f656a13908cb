"""Nova side of bare metal: flavors per resource class (flavors.py)."""
