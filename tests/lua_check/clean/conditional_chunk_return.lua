-- Refuses to load only when its own setup fails: the conditional `return slurm.ERROR` is
-- deliberate, and the return that always runs is slurm.SUCCESS.
local scratch = os.getenv("SCRUN_SCRATCH") or "/scratch"
local probe = io.open(scratch, "r")
if probe == nil then
	slurm.log_error("scratch directory %s is missing", scratch)
	return slurm.ERROR
end
probe:close()

function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	return slurm.SUCCESS
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
		config_file, job_id, user_id, group_id)
	return slurm.SUCCESS
end

return slurm.SUCCESS
