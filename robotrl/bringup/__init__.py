"""Fleet bring-up (`robotrl up`): the roles a fleet file declares as supervised processes
(`plan`, `supervisor`, `process`), what each reports (`probes`), the status file and table
(`status`); with `--ray`, each role a Ray actor on the node Ray placed it on (`ray_cluster`,
`ray_role`, `host`)."""
