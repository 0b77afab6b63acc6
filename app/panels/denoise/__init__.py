"""The denoise panel."""
