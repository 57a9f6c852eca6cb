-- Exercises the parser with Lua 5.4 syntax a site script may contain; still a clean script.
local Stage = {}
Stage.__index = Stage

function Stage.new(name, ...)
	local self = setmetatable({name = name, steps = table.pack(...)}, Stage)
	return self
end

function Stage:describe()
	local parts = {}
	for i = 1, self.steps.n, 1 do
		parts[#parts + 1] = tostring(self.steps[i])
	end
	return self.name .. ": " .. table.concat(parts, ", ")
end

local LIMITS = {
	["max-size"] = 2 ^ 10 * 4,
	half = 7 // 2,
	mask = (0xFF & ~0x0F) | 1 << 4 >> 1,
	xor = 5 ~ 3,
	ratio = 0x1p-2 + 1e3 % 7 - -1,
	nested = {1, 2, 3; 4, [5] = "five"},
}

local LONG = [==[
a long string with ]] inside
]==]

--[[ a long comment
     spanning lines ]]

local function count_until(limit)
	local total = 0
	repeat
		local step = total < 10 and 1 or 2
		total = total + step
	until total >= limit or step > 1
	while true do
		if total % 2 == 0 then break end
		total = total + 1
	end
	for _, value in ipairs({1, 2, 3}) do
		if value == 2 then goto continue end
		total = total + value
		::continue::
	end
	return total
end

local escapes = "tab\tnewline\n\x41\65\u{48}\z
                 continued"

function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	local stage = Stage.new(id, bundle, #LONG, LIMITS.half, LIMITS["max-size"], LIMITS.mask)
	slurm.log_debug("%s %d %s %s", stage:describe(), count_until(job_id), escapes, LIMITS.nested[5])
	local minutes = slurm.time_str2mins("1-2:30")
	if minutes < 0 then
		return slurm.ERROR
	elseif minutes == 0 then
		error("no time")
	else
		return math.tointeger(minutes) and slurm.SUCCESS or slurm.ERROR
	end
end

slurm_scrun_stage_out = function(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir,
		config_file, job_id, user_id, group_id)
	local ok, problem = pcall(function() return LIMITS.xor + LIMITS.ratio end)
	if not ok then
		slurm.log(0, tostring(problem))
	end
	do
		return slurm.SUCCESS
	end
end

return slurm.SUCCESS
