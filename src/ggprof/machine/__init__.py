"""The machine: OS facts, measured bandwidth, hardware profiles, and which device a command means."""
