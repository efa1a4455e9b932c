"""Fleet bring-up on this machine (`robotrl up`): the roles a fleet file declares as
supervised processes (`plan`, `supervisor`), what each reports (`probes`), and the
status file and table (`status`)."""
