"""Example participant services (payments, inventory, shipping), each runnable as a process."""
