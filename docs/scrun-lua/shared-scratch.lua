-- scrun.lua: stage each container into a scratch filesystem that the compute nodes share
-- with the login host, and back. Install it beside slurm.conf on the host where podman or
-- docker runs; set `scratch` to the shared filesystem's path (the same on every node).
--
-- The nodes cannot read the login host's container storage (podman's /var/lib/containers,
-- a rootless user's graphroot, docker's data root), its /run or its /tmp. So stage-in copies
-- the container's root filesystem, and the files podman or docker bind-mount into it
-- (/etc/hosts, /etc/resolv.conf, /etc/hostname, /run/.containerenv, /dev/shm, and the
-- user's own `-v /data:/data`), to <scratch>/<uid>/scrun/<id>/, and points the container's
-- config at the copies. It drops the config's hooks, which are the engine's own programs for
-- the login host (docker's network setup runs /proc/<dockerd's pid>/exe) and fail on a node
-- or act on the wrong host, and its cgroup path, the engine's cgroup on the login host (Slurm
-- places the step on the node). Nothing else in the config changes: the container runs as
-- podman or docker made it. Bind-mount sources under `shared_sources` (the homes, the
-- scratch itself) are left alone: the nodes see them.
-- Stage-out copies the root filesystem back (what the container wrote shows up in podman's
-- or docker's copy, e.g. for `podman commit` or `podman cp`), and every bind mount it carried
-- that is not read-only: what the container changed there (not its whole copy: what others
-- wrote meanwhile stays), deletions included; what it wrote to `-v /data:/data` is in /data
-- on the login host afterwards. Then it removes the staged copy.
-- Every directory on the way to <scratch>/<uid>/scrun/<id> must be the user's or root's and
-- writable by no one else (root's sticky directories, like a 1777 /scratch, excepted): no
-- other user can plant, swap or read what is staged for this one.
-- Its commands run on the login host (slurm.allocator_command), as the user.
-- Plain Lua 5.1 (no table.unpack): Debian builds Slurm's own scrun against Lua 5.1.
local scratch = "/scratch"
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

local function staged_path(id, user_id)
	return string.format("%s/%d/scrun/%s", scratch, math.floor(user_id), id)
end

-- A shell command that checks every directory from / down to `path` (below `base`, the
-- site's scratch, which must exist), making the missing ones below `base` with mode 0700
-- when `make` is set (else it exits 3 at the first missing one). Below `base` each must be
-- the user's own; `base` and those above it the user's or root's. None may be writable by
-- anyone else, unless it is root's and sticky (like /tmp). Links are followed only on the
-- way to `base`. It fails with one line naming the directory at fault. (In a user
-- namespace, as under rootless podman, root's files show the overflow uid, as do a root-
-- squashing NFS server's: it counts as root's above `base` only.)
local function private_dir_command(base, path, make)
	return "base=" .. quote(base) .. " path=" .. quote(path) .. " make=" .. (make and "1" or "0") .. "\n" .. [[
me=$(id -u)
nobody=$(cat /proc/sys/kernel/overflowuid 2>/dev/null || echo 65534)
fail() { echo "unsafe staging path: $*"; exit 1; }
site() { [ "$1" = "$me" ] || [ "$1" = 0 ] || [ "$1" = "$nobody" ]; }
check() {
	if [ -L "$1" ] || [ ! -d "$1" ]; then fail "$1 is not a directory"; fi
	s=$(stat -c %u:%a -- "$1") || exit 1
	owner=${s%:*} mode=0${s#*:}
	if [ "$owner" != "$me" ] && { [ "$2" = mine ] || ! site "$owner"; }; then
		fail "$1 belongs to uid $owner, not to you (uid $me)"
	fi
	if [ $((mode & 022)) != 0 ] && { [ $((mode & 01000)) = 0 ] || { [ "$owner" != 0 ] && [ "$owner" != "$nobody" ]; }; }; then
		fail "$1 is writable by others"
	fi
}
set -f
IFS=/
p=
for c in $base; do
	[ -n "$c" ] || continue
	p=$p/$c
	if [ -L "$p" ]; then site "$(stat -c %u -- "$p")" || fail "$p is a link another user made"; elif [ -e "$p" ]; then check "$p" site; fi
done
real=$(realpath -e -- "$base") || fail "$base does not exist"
check / site
p=
for c in $real${path#"$base"}; do
	[ -n "$c" ] || continue
	p=$p/$c
	case "$real/" in
	"$p/"*) check "$p" site ;;
	*)
		if [ ! -e "$p" ] && [ ! -L "$p" ]; then [ "$make" = 1 ] || exit 3; mkdir -m 700 -- "$p" 2>/dev/null; fi
		check "$p" mine
		;;
	esac
done
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

-- A shell command (a subshell) that carries the bind mount source `from` to `to` (a
-- directory's contents, or a file), leaving out `skip` (relative to `from`), after refusing
-- a source larger than `limit_kib`. It writes beside the copy what the copy back needs:
-- `to.carried`, the entries carried (NUL-separated), and `to.since`, touched last: what the
-- container creates, changes or deletes is told from what others did meanwhile by it.
local function carry_in_command(from, to, skip, limit_kib)
	return "(from=" .. quote(from) .. " to=" .. quote(to) .. " skip=" .. quote(skip) .. " limit=" .. math.floor(limit_kib) .. "\n" .. [[
set --
if [ -n "$skip" ]; then set -- --exclude="/$skip"; fi
if [ -n "$skip" ]; then size=$(du -sk --exclude="$from/$skip" -- "$from"); else size=$(du -sk -- "$from"); fi || exit 1
size=${size%%[!0-9]*}
if [ "$size" -gt "$limit" ]; then
	echo "$from holds $((size / 1024)) MiB, more than this site carries to the nodes ($((limit / 1024)) MiB): put it on a filesystem the nodes share"
	exit 1
fi
if [ -d "$from" ] && [ ! -L "$from" ]; then
	rsync -a --numeric-ids "$@" -- "$from/" "$to/" && (cd "$to" && find . -mindepth 1 -printf '%P\0') >"$to.carried"
else
	rsync -a --numeric-ids -- "$from" "$to"
fi && touch -- "$to.since") || exit 1
]]
end

-- A shell command (a subshell) that writes, beside each bind mount's copy in `mounts`,
-- `<copy>.changed`: the entries whose status changed after its `.since` (a file's: "x"
-- when it did), as carry_back_command reads them.
local function changed_lists_command(mounts)
	return "(for since in " .. quote(mounts) .. [[/*.since; do
	[ -e "$since" ] || continue
	copy=${since%.since}
	if [ -d "$copy" ] && [ ! -L "$copy" ]; then
		(cd "$copy" && find . -mindepth 1 -cnewer "$since" -printf '%P\0') >"$copy.changed" || exit 1
	else
		find "$copy" -maxdepth 0 -cnewer "$since" -printf x >"$copy.changed" || exit 1
	fi
done)]]
end

-- A shell command (a subshell) that copies back into the bind mount source `source` what
-- the container changed in its copy `copy`: the entries `copy.changed` lists (written by
-- changed_lists_command where it ran), and the deletions of what was carried; nothing
-- else, so what others wrote to `source` meanwhile stays (two containers of one `-v DIR`:
-- both one's and the other's writes). A failure sets `failed`.
local function carry_back_command(copy, source)
	return "(copy=" .. quote(copy) .. " source=" .. quote(source) .. "\n" .. [[
if [ ! -f "$copy.changed" ]; then echo "no list of what the container changed in $copy"; exit 1; fi
if [ ! -d "$copy" ] || [ -L "$copy" ]; then
	[ ! -s "$copy.changed" ] || exec rsync -a --numeric-ids --inplace -- "$copy" "$source"
	exit 0
fi
rsync -a --numeric-ids --inplace --from0 --files-from="$copy.changed" -- "$copy/" "$source/" || exit 1
(cd "$copy" && find . -mindepth 1 -printf '%P\0') | sort -z >"$copy.now" || exit 1
sort -z "$copy.carried" | comm -z -23 - "$copy.now" | xargs -0 -r -I{} rm -rf -- "$source/{}") || failed=1
]]
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
	local staged = staged_path(id, user_id)
	local prepare = private_dir_command(scratch, staged, true)
		.. "\nmkdir -m 700 -- " .. quote(staged .. "/rootfs") .. " " .. quote(staged .. "/mounts")
	if not run("preparing " .. staged, prepare) then
		return slurm.ERROR
	end
	if not run("copying the root filesystem", "rsync -a --numeric-ids -- " .. quote(rootfs .. "/") .. " " .. quote(staged .. "/rootfs/")) then
		return slurm.ERROR
	end
	local copies = ""
	for _, carried in ipairs(carried_mounts(config)) do
		local copy = string.format("%s/mounts/%d", staged, carried.index)
		copies = copies .. carry_in_command(carried.source, copy, inner_scratch(carried.source), carry_limit_mib * 1024)
		config["mounts"][carried.index]["source"] = copy
	end
	if copies ~= "" and not run("copying the bind mounts", copies) then
		return slurm.ERROR
	end
	config["root"]["path"] = staged .. "/rootfs"
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
	local file = io.open(staged .. "/config.json", "wb")
	if not file then
		slurm.log_error("%s", "cannot write " .. staged .. "/config.json")
		return slurm.ERROR
	end
	file:write(slurm.to_json(config))
	file:close()
	slurm.set_bundle_path(staged)
	slurm.set_root_path(staged .. "/rootfs")
	return slurm.SUCCESS
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir, config_file, job_id, user_id, group_id)
	local staged = staged_path(id, user_id)
	if bundle == orig_bundle then
		-- stage-in did not finish: nothing ran, nothing goes back; remove what it made
		local rc = slurm.allocator_command(private_dir_command(scratch, staged, false))
		if rc == 0 then
			return run("removing the staged copy", "rm -rf -- " .. quote(staged)) and slurm.SUCCESS or slurm.ERROR
		end
		return slurm.SUCCESS
	end
	local synced = run("copying the root filesystem back",
		"rsync -a --numeric-ids --delete -- " .. quote(root_path .. "/") .. " " .. quote(orig_root_path .. "/"))
	local config = read_config(config_file)
	if config == nil then
		slurm.log_error("%s", "cannot read " .. config_file .. ": the bind mounts' writes are left in " .. staged)
		return slurm.ERROR
	end
	local copies = changed_lists_command(bundle .. "/mounts") .. " || failed=1\n"
	for _, carried in ipairs(carried_mounts(config)) do
		if carried.writable then
			local copy = string.format("%s/mounts/%d", bundle, carried.index)
			copies = copies .. carry_back_command(copy, carried.source)
		end
	end
	if copies ~= "" then
		synced = run("copying the bind mounts back", copies .. "exit ${failed:-0}") and synced
	end
	if not synced then
		slurm.log_error("%s", "what the container wrote is kept in " .. staged)
		return slurm.ERROR
	end
	if run("removing the staged copy", "rm -rf -- " .. quote(bundle)) then
		return slurm.SUCCESS
	end
	return slurm.ERROR
end

return slurm.SUCCESS
