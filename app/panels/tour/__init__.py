"""The tour panel."""
