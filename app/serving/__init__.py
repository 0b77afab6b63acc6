"""What serves: the app's machinery, under the panels (which import it; it never imports them)."""
