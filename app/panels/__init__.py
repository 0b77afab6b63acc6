"""What shows: the page's panels, each in one place, over the serving machinery (app/serving/)."""
