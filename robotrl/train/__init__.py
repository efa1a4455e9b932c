"""Behaviour-cloning training of chunk policies (`robotrl train`)."""
