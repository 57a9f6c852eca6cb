-- scrun.lua: run each container from a copy on the local disk of each of its compute nodes.
-- The recommended layout where a job's nodes share a scratch filesystem that is slow or
-- busy to run containers from: the container's files are read from the node's own disk.
-- Install it beside slurm.conf on the host where podman or docker runs; set `scratch` to a
-- filesystem the login host and every node share (used only to carry the copy over) and
-- `node_local` to a directory on each node's own disk.
--
-- Stage-in copies the container's root filesystem, and the files podman or docker
-- bind-mount into it (/etc/hosts, /etc/resolv.conf, /run/.containerenv, /dev/shm, and the
-- user's own `-v /data:/data`), to <scratch>/<uid>/scrun/<id>/ on the login host
-- (slurm.allocator_command), with a config that names their node-local paths; then every
-- node of the job copies it to <node_local>/scrun-<uid>/<id>/ (slurm.remote_command: one
-- task on each node, as the user), and the container runs from there. It drops the config's
-- hooks (the engine's own programs for the login host) and its cgroup path (the engine's
-- cgroup on the login host; Slurm places the step on the node). Bind-mount sources under
-- `shared_sources` (the homes, the scratch) are left alone: the nodes see them.
-- Stage-out copies what the container wrote on its first node back (only what changed is
-- sent): into podman's or docker's copy of the root filesystem, and into every bind mount
-- it carried that is not read-only: what the container changed there (not its whole copy:
-- what others wrote meanwhile stays), deletions included (what it wrote to `-v /data:/data`
-- is in /data on the login host afterwards). Then it removes the copies, on the nodes and
-- in the scratch.
-- Every directory on the way to <scratch>/<uid>/scrun/<id> and, on each node, to
-- <node_local>/scrun-<uid>/<id> must be the user's or root's and writable by no one else
-- (root's sticky directories, like /tmp, excepted): no other user can plant, swap or read
-- what is staged for this one.
-- Plain Lua 5.1 (no table.unpack): Debian builds Slurm's own scrun against Lua 5.1.
local scratch = "/scratch"
local node_local = "/tmp"
local shared_sources = { "/home", scratch }
-- The most a bind mount the nodes cannot see may hold (MiB): it is copied there and back.
local carry_limit_mib = 1024

local function quote(s)
	return "'" .. string.gsub(s, "'", "'\\''") .. "'"
end

local function run(what, command)
	local rc, output = slurm.allocator_command(command)
	if rc ~= 0 then
		slurm.log_error("%s failed (exit %d): %s", what, rc, string.sub(output, 1, 300))
	end
	return rc == 0
end

local function under(path, dirs)
	for _, dir in ipairs(dirs) do
		if path == dir or string.sub(path, 1, #dir + 1) == dir .. "/" then
			return true
		end
	end
	return false
end

-- the kernel's file systems and the shared ones: the nodes have their own or the same
local function seen_by_nodes(path)
	return under(path, { "/dev", "/proc", "/sys" }) or under(path, shared_sources)
end

local function read_config(path)
	local file = io.open(path, "rb")
	if not file then
		return nil
	end
	local text = file:read("*a")
	file:close()
	return slurm.from_json(text)
end

local function run_on_nodes(what, command)
	local rc, output = slurm.remote_command(command)
	if rc ~= 0 then
		slurm.log_error("%s on the nodes failed (exit %d): %s", what, rc, string.sub(output, 1, 300))
	end
	return rc == 0
end

-- A node's command that reads or removes a container's copy there, run with all of the
-- user's ids mapped (unshare --map-auto: util-linux 2.38 and newuidmap, which rootless crun
-- needs too) where it can: crun made some of the copy as the container's other ids (the
-- mount points of a --userns=keep-id container belong to a subordinate id of the user's).
local function with_user_ids(command)
	return "if unshare --map-auto --map-root-user true 2>/dev/null; then exec unshare --map-auto --map-root-user -- /bin/sh -c "
		.. quote(command) .. "; fi\n" .. command
end

local function carried_path(id, user_id)
	return string.format("%s/%d/scrun/%s", scratch, math.floor(user_id), id)
end

local function node_path(id, user_id)
	return string.format("%s/scrun-%d/%s", node_local, math.floor(user_id), id)
end

-- A shell command that checks every directory from / down to `path` (below `base`, the
-- site's scratch, which must exist), making the missing ones below `base` with mode 0700
-- when `make` is set (else it exits 3 at the first missing one). Below `base` each must be
-- the user's own; `base` and those above it the user's or root's. None may be writable by
-- anyone else, unless it is root's and sticky (like /tmp). Links are followed only on the
-- way to `base`. It fails with one line naming the directory at fault. (In a user
-- namespace, as under rootless podman, root's files show the overflow uid, as do a root-
-- squashing NFS server's: it counts as root's above `base` only.) One `stat` reads every
-- directory that exists (a second one only when `base` lies behind a link), one `mkdir`
-- makes the missing ones: it runs before each container, twice.
local function private_dir_command(base, path, make)
	return "base=" .. quote(base) .. " path=" .. quote(path) .. " make=" .. (make and "1" or "0") .. "\n" .. [[
me=$(id -u)
# (with cat: a shell's read takes a byte at a time, and a /proc/sys file ends after one)
nobody=$(cat /proc/sys/kernel/overflowuid 2>/dev/null || echo 65534)
fail() { echo "unsafe staging path: $*"; exit 1; }
site() { [ "$1" = "$me" ] || [ "$1" = 0 ] || [ "$1" = "$nobody" ]; }
# check DIR UID:MODE:TYPE WHOSE (site or mine), from stat's line for DIR
check() {
	owner=${2%%:*} mode=${2#*:} type=${2#*:*:}
	mode=0${mode%%:*}
	[ "$type" = directory ] || fail "$1 is not a directory"
	if [ "$owner" != "$me" ] && { [ "$3" = mine ] || ! site "$owner"; }; then
		fail "$1 belongs to uid $owner, not to you (uid $me)"
	fi
	if [ $((mode & 022)) != 0 ] && { [ $((mode & 01000)) = 0 ] || { [ "$owner" != 0 ] && [ "$owner" != "$nobody" ]; }; }; then
		fail "$1 is writable by others"
	fi
}
# walk TOP REST: lists in $dirs (newline-separated) / and the directories down to TOP, which
# are the site's (links allowed on the way when TOP is `base`), and those below, down to
# `path`, that exist; the first missing one below in $missing, those after it in $more
walk() {
	dirs=/ missing= more= p=
	for c in $1; do
		[ -n "$c" ] || continue
		p=$p/$c
		[ -e "$p" ] || [ -L "$p" ] && dirs="$dirs
$p"
	done
	for c in $2; do
		[ -n "$c" ] || continue
		p=$p/$c
		if [ -n "$missing" ]; then more="$more
$p"
		elif [ -e "$p" ] || [ -L "$p" ]; then dirs="$dirs
$p"
		else missing=$p
		fi
	done
}
# judge LINKS WHOSE...: checks each of $dirs against stat's lines in $lines (the site's down
# to $top, then WHOSE); with LINKS set, a link on the way is allowed when the site's
judge() {
	links=$1 whose=site linked=
	set -- $lines
	for d in $dirs; do
		case "$top/" in "${d%/}/"*) whose=site ;; *) whose=mine ;; esac
		# (below a link, on the real path only)
		if [ -n "$linked" ] && [ "$whose" = mine ]; then break; fi
		if [ "$links" = 1 ] && [ "$whose" = site ] && [ "${1##*:}" = "symbolic link" ]; then
			site "${1%%:*}" || fail "$d is a link another user made"
			linked=1
		else
			check "$d" "$1" "$whose"
		fi
		shift
	done
}
[ -e "$base" ] || fail "$base does not exist"
set -f
IFS=/
top=$base
walk "$base" "${path#"$base"}"
IFS='
'
lines=$(stat -c %u:%a:%F -- $dirs) || exit 1
judge 1
if [ -n "$linked" ]; then
	top=$(realpath -e -- "$base") || fail "$base does not exist"
	IFS=/
	walk "$top" "${path#"$base"}"
	IFS='
'
	lines=$(stat -c %u:%a:%F -- $dirs) || exit 1
	judge 0
fi
if [ -n "$missing" ]; then
	[ "$make" = 1 ] || exit 3
	if ! mkdir -m 700 -- $missing $more 2>/dev/null; then
		dirs="$missing$more"
		lines=$(stat -c %u:%a:%F -- $dirs) || exit 1
		judge 0
	fi
fi
unset IFS
set +f]]
end

local function has_option(mount, name)
	for _, option in ipairs(mount["options"] or {}) do
		if option == name then
			return true
		end
	end
	return false
end

-- The bind mounts whose sources the nodes cannot see, with their index in config.mounts:
-- stage-in copies them (to mounts/<index> in the staged bundle), stage-out copies back
-- those that are not read-only. Both read them from the engine's own config.json.
local function carried_mounts(config)
	local carried = {}
	for i, mount in ipairs(config["mounts"] or {}) do
		local source = mount["source"]
		local bind = mount["type"] == "bind" or has_option(mount, "bind") or has_option(mount, "rbind")
		if bind and source ~= nil and not seen_by_nodes(source) then
			table.insert(carried, { index = i, source = source, writable = not has_option(mount, "ro") })
		end
	end
	return carried
end

-- What of `source` is not to be carried: the scratch itself when it lies below (`-v /tmp:/tmp`
-- with the scratch under /tmp would copy the staged copy into itself). Relative to `source`.
local function inner_scratch(source)
	if string.sub(scratch, 1, #source + 1) == source .. "/" then
		return string.sub(scratch, #source + 2)
	end
	if source == "/" then
		return string.sub(scratch, 2)
	end
	return ""
end

-- Copies a tree or a file as `rsync -a --numeric-ids` would (hard links kept too), in one
-- process: a local rsync takes ~45 ms to start its three, for a file as for a tree. As
-- rsync, it keeps the owners only when run by root (keep_command sets $keep): a user's
-- copy is the user's, which a rootless engine's --userns=keep-id container needs on the
-- node (its root directory is its root's, mode 0700, in the engine's storage).
local copy_command = "cp -RP --preserve=$keep --"
local keep_command = [[
keep=mode,timestamps,links
[ "$(id -u)" != 0 ] || keep=$keep,ownership
]]

-- A shell command that runs a step (`try WHAT COMMAND...`): on failure it prints WHAT, the
-- exit status and the command's own words on one line, and exits with that status.
local try_command = [[
try() {
	what=$1
	shift
	out=$("$@" 2>&1) || { rc=$?; echo "$what failed (exit $rc): $out"; exit "$rc"; }
}
]]

-- A shell command that copies the bind mount source `source` to `copy` (a directory's
-- contents, or a file), leaving out `skip` (relative to `source`), and lists what it
-- carried in `<copy>.carried` (NUL-separated) when it is a directory.
local function carry_one_command(source, copy, skip)
	local from, to, what = quote(source), quote(copy), quote("copying " .. source)
	local command = string.format("try %s %s %s %s", what, copy_command, from, to)
	if skip ~= "" then
		command = string.format("if [ -d %s ] && [ ! -L %s ]; then try %s rsync -a --numeric-ids --exclude=%s -- %s %s; else %s; fi",
			from, from, what, quote("/" .. skip), quote(source .. "/"), quote(copy .. "/"), command)
	end
	return string.format("%s\nif [ -d %s ] && [ ! -L %s ]; then find %s -mindepth 1 -printf '%%P\\0' >%s || exit 1; fi\n",
		command, to, to, to, quote(copy .. ".carried"))
end

-- A shell command that carries the bind mounts `mounts` (each: `source`, the path of its
-- `copy`, and what of the source to `skip`, relative to it) to their copies
-- (carry_one_command), after refusing a source larger than `limit_kib` (one `du` for all).
-- Beside each copy it touches `<copy>.since` last (with `also`, the root filesystem's
-- mark): what the container creates, changes or deletes is told from what others did
-- meanwhile by it.
local function carry_in_command(mounts, limit_kib, also)
	local sources, excludes, copies, marks = "", "", "", quote(also)
	for _, m in ipairs(mounts) do
		sources = sources .. " " .. quote(m.source)
		if m.skip ~= "" then
			excludes = excludes .. " --exclude=" .. quote(m.source .. "/" .. m.skip)
		end
		copies = copies .. carry_one_command(m.source, m.copy, m.skip)
		marks = marks .. " " .. quote(m.copy .. ".since")
	end
	if sources == "" then
		return "touch -- " .. marks
	end
	return "limit=" .. math.floor(limit_kib) .. "\nset --" .. sources .. "\n" .. [[
# one du for all sources (one each when du left one out: one inside another, or twice)
out=$(du -sk]] .. excludes .. [[ -- "$@") || exit 1
sizes= n=0
set -f
IFS='
'
for line in $out; do n=$((n + 1)) sizes="$sizes ${line%%[!0-9]*}"; done
unset IFS
set +f
if [ "$n" != $# ]; then
	sizes=
	for from; do out=$(du -sk]] .. excludes .. [[ -- "$from") || exit 1; sizes="$sizes ${out%%[!0-9]*}"; done
fi
for from; do
	sizes=${sizes# }
	size=${sizes%% *}
	sizes=${sizes#"$size"}
	if [ "$size" -gt "$limit" ]; then
		echo "$from holds $((size / 1024)) MiB, more than this site carries to the nodes ($((limit / 1024)) MiB): put it on a filesystem the nodes share"
		exit 1
	fi
done
]] .. copies .. "touch -- " .. marks
end

-- The one shell command of stage-in on the login host (each process it saves is a few ms
-- of every container's start): `dir` made safely (private_dir_command), the root
-- filesystem `rootfs` copied to `dir`/rootfs, the bind mounts `mounts` carried to their
-- copies (carry_in_command), and the marks touched.
local function stage_command(rootfs, dir, mounts)
	local mkdir = ""
	if #mounts > 0 then
		mkdir = "mkdir -m 700 -- " .. quote(dir .. "/mounts") .. " || exit 1\n"
	end
	return private_dir_command(scratch, dir, true) .. "\n" .. keep_command .. try_command
		.. "try 'copying the root filesystem' " .. copy_command .. " " .. quote(rootfs .. "/.") .. " " .. quote(dir .. "/rootfs") .. "\n"
		.. mkdir .. carry_in_command(mounts, carry_limit_mib * 1024, dir .. "/rootfs.since")
end

-- A shell command (a subshell) that writes, beside each bind mount's copy in `mounts`,
-- `<copy>.changed`: the entries whose status changed after its `.since`, NUL-separated
-- (a directory's own, when it changed, as an empty name: a deletion there; a file's: "x"
-- when it did), as carry_back_command reads them. Empty when the container changed nothing.
local function changed_lists_command(mounts)
	return "(for since in " .. quote(mounts) .. [[/*.since; do
	[ -e "$since" ] || continue
	copy=${since%.since}
	if [ -d "$copy" ] && [ ! -L "$copy" ]; then
		find "$copy" -cnewer "$since" -printf '%P\0' >"$copy.changed" || exit 1
	else
		find "$copy" -maxdepth 0 -cnewer "$since" -printf x >"$copy.changed" || exit 1
	fi
done)]]
end

-- A shell command that copies back into the bind mount source `source` what the container
-- changed in its copy `copy`: the entries `copy.changed` lists (written by
-- changed_lists_command where it ran), and the deletions of what was carried; nothing
-- else, so what others wrote to `source` meanwhile stays (two containers of one `-v DIR`:
-- both one's and the other's writes). Nothing runs when it changed nothing. A failure sets
-- `failed`.
local function carry_back_command(copy, source)
	local changed = quote(copy .. ".changed")
	return "if [ ! -f " .. changed .. " ] || [ -s " .. changed .. " ]; then (copy=" .. quote(copy) .. " source=" .. quote(source) .. "\n" .. [[
if [ ! -f "$copy.changed" ]; then echo "no list of what the container changed in $copy"; exit 1; fi
if [ -f "$copy" ] && [ ! -L "$copy" ]; then
	keep=mode,timestamps
	[ "$(id -u)" != 0 ] || keep=$keep,ownership
	exec cp -P --preserve=$keep -- "$copy" "$source"
elif [ ! -d "$copy" ] || [ -L "$copy" ]; then
	exec rsync -a --numeric-ids --inplace -- "$copy" "$source"
fi
rsync -a --numeric-ids --inplace --from0 --files-from="$copy.changed" -- "$copy/" "$source/" || exit 1
find "$copy" -mindepth 1 -printf '%P\0' | sort -z >"$copy.now" || exit 1
sort -z "$copy.carried" | comm -z -23 - "$copy.now" | xargs -0 -r -I{} rm -rf -- "$source/{}") || failed=1; fi
]]
end

-- A shell command that copies the root filesystem `from` back to `to` when the container
-- changed anything in it after the mark `from.since` (or the mark is missing): most
-- containers write nothing there, and then nothing has to be compared. Where file times
-- are whole seconds (the mark's are), a write in the mark's second would look older than
-- it: there it is always copied back. A failure sets `failed`.
local function root_back_command(from, to)
	local mark = quote(from .. ".since")
	return "if ! changed=$(find " .. quote(from) .. " -cnewer " .. mark .. " -print -quit 2>&1) || [ -n \"$changed\" ]"
		.. " || ! since=$(stat -c %y -- " .. mark .. ") || [ \"${since#*.000000000}\" != \"$since\" ]; then\n"
		.. "\tout=$(rsync -a --numeric-ids --delete -- " .. quote(from .. "/") .. " " .. quote(to .. "/") .. " 2>&1)"
		.. " || { echo \"copying the root filesystem back failed (exit $?): $out\"; failed=1; }\nfi\n"
end

function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	local config = read_config(config_file)
	if config == nil then
		slurm.log_error("%s", "cannot read " .. config_file)
		return slurm.ERROR
	end
	local rootfs = config["root"]["path"]
	if string.sub(rootfs, 1, 1) ~= "/" then
		rootfs = bundle .. "/" .. rootfs
	end
	local carry = carried_path(id, user_id)
	local here = node_path(id, user_id)
	local mounts = {}
	for _, carried in ipairs(carried_mounts(config)) do
		local copy = string.format("%s/mounts/%d", carry, carried.index)
		table.insert(mounts, { source = carried.source, copy = copy, skip = inner_scratch(carried.source) })
		config["mounts"][carried.index]["source"] = string.format("%s/mounts/%d", here, carried.index)
	end
	if not run("staging into " .. carry, stage_command(rootfs, carry, mounts)) then
		return slurm.ERROR
	end
	config["root"]["path"] = here .. "/rootfs"
	config["hooks"] = nil
	if config["linux"] ~= nil then
		config["linux"]["cgroupsPath"] = nil
		if user_id ~= 0 then
			-- a rootless engine's id mappings name its own namespace's ids, which mean
			-- nothing on a node: there crun, run as the user, maps the container's user
			-- to the user and its other ids to the user's subordinate ids (so a
			-- --userns=keep-id container runs as the user, as on the login host)
			config["linux"]["uidMappings"] = nil
			config["linux"]["gidMappings"] = nil
		end
	end
	local file = io.open(carry .. "/config.json", "wb")
	if not file then
		slurm.log_error("%s", "cannot write " .. carry .. "/config.json")
		return slurm.ERROR
	end
	file:write(slurm.to_json(config))
	file:close()
	-- (the copy is new here: the marks of the root filesystem and of each bind mount's copy
	-- are touched again after it)
	local copy = private_dir_command(node_local, here, true)
		.. "\n" .. keep_command .. copy_command .. " " .. quote(carry .. "/.") .. " " .. quote(here .. "/")
		.. " && set -- " .. quote(here .. "/mounts") .. "/*.since && { [ -e \"$1\" ] || set --; }"
		.. " && touch -- " .. quote(here .. "/rootfs.since") .. " \"$@\""
	if not run_on_nodes("copying the container", copy) then
		return slurm.ERROR
	end
	slurm.set_bundle_path(here)
	slurm.set_root_path(here .. "/rootfs")
	return slurm.SUCCESS
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir, config_file, job_id, user_id, group_id)
	local carry = carried_path(id, user_id)
	if bundle == orig_bundle then
		-- stage-in did not finish: nothing ran, nothing goes back; remove what it made
		-- (on the nodes too, where the copy may have stopped half way: best effort, as a job
		-- that has already ended runs no step)
		local here = node_path(id, user_id)
		local _ = slurm.remote_command("(" .. private_dir_command(node_local, here, false) .. ") && "
			.. with_user_ids("rm -rf -- " .. quote(here)))
		-- (exit 1 or 3: not the user's, or not there; nothing to remove)
		local rc, output = slurm.allocator_command(private_dir_command(scratch, carry, false)
			.. "\nrm -rf -- " .. quote(carry) .. " || exit 4")
		if rc == 4 then
			slurm.log_error("removing the carried copy failed: %s", string.sub(output, 1, 300))
			return slurm.ERROR
		end
		return slurm.SUCCESS
	end
	-- the first node's copy is the container's task 0: what it wrote goes back (the root
	-- filesystem when it changed anything there), with, beside each bind mount's copy, the
	-- list of what the container changed in it (only this node can tell, by its `.since`),
	-- and the copies themselves only when it changed something
	local mounts = bundle .. "/mounts"
	local back = "if [ \"$SLURM_NODEID\" = 0 ]; then failed=\n"
		.. root_back_command(root_path, carry .. "/rootfs")
		.. "[ -z \"$failed\" ] && " .. changed_lists_command(mounts)
		.. " && set -- " .. quote(mounts) .. "/*.changed && if [ -e \"$1\" ]; then\n"
		.. "\tany=\n\tfor c; do [ ! -s \"$c\" ] || any=1; done\n"
		.. "\tif [ -n \"$any\" ]; then rsync -a --numeric-ids --delete -- " .. quote(mounts .. "/") .. " " .. quote(carry .. "/mounts/")
		.. "; else cp -- \"$@\" " .. quote(carry .. "/mounts/") .. "; fi\n"
		.. "fi; fi; s=$?; rm -rf -- " .. quote(bundle) .. "; exit $s"
	if not run_on_nodes("copying what the container wrote back", with_user_ids(back)) then
		slurm.log_error("%s", "what the container wrote is kept in " .. carry)
		return slurm.ERROR
	end
	local config = read_config(config_file)
	if config == nil then
		run("copying the root filesystem back", "failed=\n" .. root_back_command(carry .. "/rootfs", orig_root_path) .. "[ -z \"$failed\" ]")
		slurm.log_error("%s", "cannot read " .. config_file .. ": the bind mounts' writes are left in " .. carry)
		return slurm.ERROR
	end
	-- one command: the root filesystem, then each bind mount that is not read-only, back;
	-- the carried copy removed when all went back (exit 2 if that alone failed)
	local back_here = "failed=\n" .. root_back_command(carry .. "/rootfs", orig_root_path)
	for _, mount in ipairs(carried_mounts(config)) do
		if mount.writable then
			back_here = back_here .. carry_back_command(string.format("%s/mounts/%d", carry, mount.index), mount.source)
		end
	end
	back_here = back_here .. "[ -z \"$failed\" ] || exit 1\nrm -rf -- " .. quote(carry) .. " || exit 2"
	local rc, output = slurm.allocator_command(back_here)
	if rc == 0 then
		return slurm.SUCCESS
	end
	slurm.log_error("staging out of %s failed (exit %d): %s", carry, rc, string.sub(output, 1, 300))
	if rc == 1 then
		slurm.log_error("%s", "what the container wrote is kept in " .. carry)
	end
	return slurm.ERROR
end

return slurm.SUCCESS
