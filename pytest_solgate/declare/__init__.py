"""Declare: the work a kernel must do, and the hardware it is held against."""
