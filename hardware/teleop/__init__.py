"""Teleoperation devices: keyboard, gamepad, leader arm, scripted expert, dataset replay."""
