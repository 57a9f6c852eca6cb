-- scrun.lua: run each container from a copy on the local disk of each of its compute nodes.
-- The recommended layout where a job's nodes share a scratch filesystem that is slow or
-- busy to run containers from: the container's files are read from the node's own disk.
-- Install it beside slurm.conf on the host where podman or docker runs; set `scratch` to a
-- filesystem the login host and every node share (used only to carry the copy over) and
-- `node_local` to a directory on each node's own disk.
--
-- Stage-in copies the container's image once into the user's image cache on the scratch
-- (`image_cache`, below), and the files podman or docker bind-mount into it (/etc/hosts,
-- /etc/resolv.conf, /run/.containerenv, and the user's own `-v /data:/data`) to
-- <scratch>/<uid>/scrun/<id>/ on the login host (slurm.allocator_command), with a config
-- that names their node-local paths; then every node of the job copies the image, once, from
-- the scratch's cache to its own (<node_local>/scrun-<uid>/cache), and the rest to
-- <node_local>/scrun-<uid>/<id>/ (slurm.remote_command: one task on each node, as the user).
-- The container runs from there: its root is the node's copy of the image, read-only, below
-- a writable layer of its own. It drops the config's hooks (the engine's own programs for
-- the login host) and its cgroup path (the engine's cgroup on the login host; Slurm places
-- the step on the node). The engine's /dev/shm, a tmpfs on the login host, becomes one of
-- the same size on the node. Bind-mount sources under `shared_sources` (the homes, the
-- scratch) are left alone: the nodes see them.
-- Stage-out copies what the container wrote on its first node back (only what changed is
-- sent: its writable layer, deletions included): into podman's or docker's copy of the root
-- filesystem, and into every bind mount it carried that is not read-only: what the
-- container changed there (not its whole copy: what others wrote meanwhile stays),
-- deletions included (what it wrote to `-v /data:/data` is in /data on the login host
-- afterwards). Then it removes the copies, on the nodes and in the scratch (the caches
-- keep the image).
-- Every directory on the way to <scratch>/<uid>/scrun/<id> and, on each node, to
-- <node_local>/scrun-<uid>/<id> must be the user's or root's and writable by no one else
-- (root's sticky directories, like /tmp, excepted): no other user can plant, swap or read
-- what is staged for this one. The caches are the user's own too.
-- (The cache's commands are shared-scratch.lua's, copied: each script stands alone.)
-- Plain Lua 5.1 (no table.unpack): Debian builds Slurm's own scrun against Lua 5.1.
local scratch = "/scratch"
local node_local = "/tmp"
local shared_sources = { "/home", scratch }
-- The most a bind mount the nodes cannot see may hold (MiB): it is copied there and back.
local carry_limit_mib = 1024
-- The image cache: each image is copied to the scratch once per user, to
-- <scratch>/<uid>/scrun-cache/<key>/rootfs, and from there once to each node, to
-- <node_local>/scrun-<uid>/cache/<key>/rootfs; every container of it runs on the node's
-- copy, read-only below a writable layer of its own in <node_local>/scrun-<uid>/<id> (kernel
-- overlay mounts, one per top-level directory, made by crun on the node). `false`: every
-- container's root filesystem is copied whole. The cache is used only where the scratch
-- can hold an overlay's writable layer (ext4, xfs, btrfs, tmpfs: the node's is carried back
-- through it, deletions included); elsewhere (NFS, Lustre, GPFS) containers are copied
-- whole. `node_local` must hold one too (ext4, xfs, btrfs, tmpfs).
local image_cache = true
-- The most each cache (the scratch's, each node's) may hold (MiB): past it, the least
-- recently used images that no container uses are removed.
local cache_limit_mib = 20480
-- After how many seconds an image's import (the first container of it) that still runs says
-- so on the container's stderr ("scrun: importing image (2.0 GiB) to the cache"), and so
-- does a node's copy of it ("scrun: copying image (2.0 GiB) to node n1"), and a container
-- that still waits for another's import or copy of its image ("scrun: waiting for another
-- container's import of this image", "... copy of this image to node n1"); 0: at once. A
-- quick one says nothing.
local import_notice_seconds = 3

local function quote(s)
	return "'" .. string.gsub(s, "'", "'\\''") .. "'"
end

-- Logs, in one line, that `what` failed (exit `rc`, its `output`) and why: that `where`, the
-- filesystem it wrote to, is full (or the user's quota there used up), when it says so;
-- else its exit status and its own words. Returns whether it succeeded.
local function report(what, rc, output, where)
	if rc == 0 then
		return true
	end
	if where and string.find(output, "No space left on device", 1, true) then
		slurm.log_error("%s failed: %s is full (what it had copied there is removed)", what, where)
	elseif where and string.find(output, "Disk quota exceeded", 1, true) then
		slurm.log_error("%s failed: your quota on %s is used up (what it had copied there is removed)", what, where)
	else
		slurm.log_error("%s failed (exit %d): %s", what, rc, string.sub(output, 1, 300))
	end
	return false
end

-- Runs `command` on the login host (`where`: the filesystem it writes to); see report.
local function run(what, command, where)
	local rc, output = slurm.allocator_command(command)
	return report(what, rc, output, where)
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

-- The lines of the file `path`; none when it cannot be read.
local function read_lines(path)
	local lines = {}
	local file = io.open(path, "rb")
	if file then
		for line in file:lines() do
			table.insert(lines, line)
		end
		file:close()
	end
	return lines
end

-- The bind mounts stage-in carried (each: `index` in config.mounts, `source`), for
-- scrun_before_start.
local carried_in = {}

-- A small file's whole content (at most 1 MiB: what the engine writes for the container,
-- /etc/hosts, /etc/resolv.conf); nil for a larger one, a directory, or none.
local function small_file_content(path)
	local file = io.open(path, "rb")
	if not file then
		return nil
	end
	local size, content = file:seek("end"), nil
	if size ~= nil and size <= 1048576 and file:seek("set") then
		content = file:read("*a")
	end
	file:close()
	return content
end

-- Writes `content` over the file at `path` (in place: it keeps its mode and owner), then
-- renews its mark `<path>.since` (what the container changes is told by it); false when
-- either cannot be written.
local function refresh_copy(path, content)
	local file = io.open(path, "wb")
	if not file then
		return false
	end
	local written = file:write(content)
	file:close()
	local mark = io.open(path .. ".since", "wb")
	if mark then
		mark:close()
	end
	return written ~= nil and mark ~= nil
end

-- Copies again, to `copy_of(index)`, each carried bind mount that is a file whose source
-- changed since stage-in copied it (podman 5 writes /etc/hosts and /etc/resolv.conf after
-- create, when stage-in has run: empty copies then), renewing its mark. The indices of
-- those it copied; nil, the reason logged, when a copy cannot be written.
local function refresh_carried_files(copy_of)
	local refreshed = {}
	for _, m in ipairs(carried_in) do
		local now = small_file_content(m.source)
		if now ~= nil and now ~= small_file_content(copy_of(m.index)) then
			if not refresh_copy(copy_of(m.index), now) then
				slurm.log_error("%s", "cannot write " .. copy_of(m.index))
				return nil
			end
			table.insert(refreshed, m.index)
		end
	end
	return refreshed
end

local function run_on_nodes(what, command, where)
	local rc, output = slurm.remote_command(command)
	return report(what .. " on the nodes", rc, output, where)
end

-- A node's command that reads or removes a container's copy there, run with all of the
-- user's ids mapped (unshare --map-auto: util-linux 2.38 and newuidmap, which rootless crun
-- needs too) where it can: crun made some of the copy as the container's other ids (the
-- mount points of a --userns=keep-id container belong to a subordinate id of the user's).
-- Root runs it as it is: its own ids may not map a container's (podman's --userns=auto).
local function with_user_ids(command)
	return "if [ \"$(id -u)\" != 0 ] && unshare --map-auto --map-root-user true 2>/dev/null; then exec unshare --map-auto --map-root-user -- /bin/sh -c "
		.. quote(command) .. "; fi\n" .. command
end

-- A container id as a file name: an id may have up to 1024 characters, a file name at most
-- 255 bytes. An id longer than 128 characters is named by its first 100 and two hashes of
-- the whole (integer arithmetic that Lua 5.1's doubles hold exactly).
local function file_name(id)
	if #id <= 128 then
		return id
	end
	local a, b = 0, 0
	for i = 1, #id do
		local c = string.byte(id, i)
		a = (a * 31 + c) % 4294967291
		b = (b * 131 + c) % 4294967279
	end
	return string.format("%s-%08x%08x", string.sub(id, 1, 100), a, b)
end

local function carried_path(id, user_id)
	return string.format("%s/%d/scrun/%s", scratch, math.floor(user_id), id)
end

local function node_path(id, user_id)
	return string.format("%s/scrun-%d/%s", node_local, math.floor(user_id), id)
end

local function node_cache_path(user_id)
	return string.format("%s/scrun-%d/cache", node_local, math.floor(user_id))
end

-- A shell command that checks every directory from / down to `path` (below `base`, the
-- site's scratch, which must exist), making the missing ones below `base` with mode 0700
-- when `make` is set (else it exits 3 at the first missing one). Below `base` each must be
-- the user's own; `base` and those above it the user's or root's. None may be writable by
-- anyone else, unless it is root's and sticky (like /tmp). Links are followed only on the
-- way to `base`. It fails with one line naming the directory at fault (or the one it
-- cannot make, and why). (In a user namespace, as under rootless podman, root's files show
-- the overflow uid, as do a root-squashing NFS server's: it counts as root's above `base`
-- only.) One `stat` reads every directory that exists (a second one only when `base` lies
-- behind a link), one `mkdir` makes the missing ones: it runs before each container, twice.
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
	if ! out=$(mkdir -m 700 -- $missing $more 2>&1); then
		# (made meanwhile by another: checked; else mkdir's first reason, e.g. a read-only scratch)
		out=${out%%
*}
		for d in $missing $more; do [ -d "$d" ] || { echo "cannot make $d: ${out##*: }"; exit 1; }; done
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

-- The index in config.mounts of the engine's /dev/shm, when it is a bind mount of what the
-- nodes cannot see: a tmpfs the engine mounted on the login host for this container
-- (podman's userdata/shm, docker's mounts/shm: 64 MB, or --shm-size). Carried as a
-- directory it would put the container's shared memory on the scratch, with no limit; so
-- on the node it is a tmpfs of its own of the same size (shm_tmpfs), private to the
-- container, whose contents end with it, as the engine's do. nil when there is none.
local function shm_mount(config)
	for i, mount in ipairs(config["mounts"] or {}) do
		local bind = mount["type"] == "bind" or has_option(mount, "bind") or has_option(mount, "rbind")
		if bind and mount["destination"] == "/dev/shm" and type(mount["source"]) == "string"
			and not seen_by_nodes(mount["source"]) then
			return i
		end
	end
	return nil
end

-- A shell command that writes the type and size of the filesystem at `source` to `file`
-- ("TYPE BLOCKS BLOCK_SIZE": tmpfs for the engine's /dev/shm), in one process; nothing
-- when it cannot tell.
local function shm_size_command(source, file)
	return "\nstat -f -c '%T %b %S' -- " .. quote(source) .. " >" .. quote(file) .. " 2>/dev/null\n"
end

-- The tmpfs mount that replaces the engine's /dev/shm bind mount `mount` on the node: the
-- size of the tmpfs `size_line` describes (shm_size_command; else 64 MB, the engines'
-- default), mode 1777, and the bind mount's nosuid, noexec and nodev.
local function shm_tmpfs(mount, size_line)
	local kind, blocks, block_size = string.match(size_line or "", "^(%S+) (%d+) (%d+)$")
	local size = 67108864
	if kind == "tmpfs" then
		size = tonumber(blocks) * tonumber(block_size)
	end
	local options = { "mode=1777", string.format("size=%d", size) }
	for _, option in ipairs(mount["options"] or {}) do
		if option == "nosuid" or option == "noexec" or option == "nodev" then
			table.insert(options, option)
		end
	end
	return { destination = "/dev/shm", type = "tmpfs", source = "shm", options = options }
end

-- The bind mounts whose sources the nodes cannot see, with their index in config.mounts:
-- stage-in copies them (to mounts/<index> in the staged bundle), stage-out copies back
-- those that are not read-only. Both read them from the engine's own config.json. The
-- engine's /dev/shm is not one of them (shm_mount).
local function carried_mounts(config)
	local carried = {}
	local shm = shm_mount(config)
	for i, mount in ipairs(config["mounts"] or {}) do
		local source = mount["source"]
		local bind = mount["type"] == "bind" or has_option(mount, "bind") or has_option(mount, "rbind")
		if bind and source ~= nil and not seen_by_nodes(source) and i ~= shm then
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
-- rsync, it keeps the owners only when run by root (keep_command sets $keep, and $owners
-- for rsync itself): a user's copy is the user's, which a rootless engine's
-- --userns=keep-id container needs on the node (its root directory is its root's, mode
-- 0700, in the engine's storage). A symbolic link named on its command line is followed (a
-- bind mount's source, which mount(2) follows too); those inside the tree are copied as
-- links.
local copy_command = "cp -RH --preserve=$keep --"
local keep_command = [[
keep=mode,timestamps,links owners=--no-g
[ "$(id -u)" != 0 ] || keep=$keep,ownership owners=
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
-- contents, or a file), leaving out `skip` (relative to `source`) and what the user cannot
-- read (carry_in_command's `carry`: an unreadable directory is an empty one in the copy,
-- an unreadable file source an empty file), and lists what it carried in `<copy>.carried`
-- (NUL-separated) when it is a directory. When the user can write nothing of a directory
-- source (a root-owned one, say), or cannot write a file source, it touches
-- `<copy>.readonly`: the copy is the user's, which the container could write (as it could
-- not through crun) and whose writes could not go back, so stage-in mounts it read-only
-- (read_only_copies). So too for a file source the user cannot read: its empty copy going
-- back would replace what it holds.
local function carry_one_command(source, copy, skip)
	local from, to, what = quote(source), quote(copy), quote("copying " .. source)
	local command = string.format("carry %s %s %s %s", what, copy_command, from, to)
	if skip ~= "" then
		command = string.format("if [ -d %s ]; then carry %s rsync -a -H $owners --numeric-ids --exclude=%s -- %s %s; else %s; fi",
			from, what, quote("/" .. skip), quote(source .. "/"), quote(copy .. "/"), command)
	end
	return string.format("%s\n[ -e %s ] || [ -L %s ] || [ -d %s ] || : >%s || exit 1\n"
		.. "if [ -d %s ] && [ ! -L %s ]; then find %s -mindepth 1 -printf '%%P\\0' >%s || exit 1; fi\n"
		.. "if [ -d %s ]; then [ -n \"$(find -H %s -writable -print -quit 2>/dev/null)\" ]; else [ -r %s ] && [ -w %s ]; fi || : >%s || exit 1\n",
		command, to, to, from, to, to, to, to, quote(copy .. ".carried"), from, from, from, from, quote(copy .. ".readonly"))
end

-- Marks read-only, in the node's `config`, each bind mount of `mounts` (carry_in_command's)
-- whose copy carry_one_command found the user could not write at all.
local function read_only_copies(config, mounts)
	for _, m in ipairs(mounts) do
		local mark = io.open(m.copy .. ".readonly", "rb")
		if mark then
			mark:close()
			local mount = config["mounts"][m.index]
			if not has_option(mount, "ro") then
				mount["options"] = mount["options"] or {}
				table.insert(mount["options"], "ro")
			end
		end
	end
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
# What the user cannot read is left out of the copies (through crun the container could
# not read it either: a lost+found, other users' files in -v /tmp:/tmp); any other
# complaint of du, cp or rsync (one about the copy, say) fails stage-in. (`denied`: the
# complaints of another kind than about a source the user cannot read.)
denied() {
	printf '%s\n' "$1" | grep -v -E \
		-e "^(du: cannot (read directory|access)|cp: cannot (access|stat)) '.*': Permission denied$" \
		-e "^cp: cannot open '.*' for reading: Permission denied$" \
		-e '^rsync: \[sender\] .*: Permission denied \(13\)$' \
		-e '^rsync error: some files/attrs were not transferred \(see previous errors\) \(code 23\)'
}
sizes_of() {
	printf '%s\n' "$1" | grep -v '^du: '
}
unreadable() {
	first=$(denied "$(printf '%s\n' "$1" | grep '^du: ')" | grep -m 1 .)
	[ -n "$first" ] || return 0
	echo "cannot carry a bind mount to the nodes: $first"
	exit 1
}
carry() {
	what=$1
	shift
	out=$(LC_ALL=C "$@" 2>&1) || { rc=$?; [ -z "$(denied "$out")" ] || { echo "$what failed (exit $rc): $out"; exit "$rc"; }; }
}
# one du for all sources (one each when du left one out: one inside another, or twice)
out=$(LC_ALL=C du -skD]] .. excludes .. [[ -- "$@" 2>&1) || unreadable "$out"
out=$(sizes_of "$out")
sizes= n=0
set -f
IFS='
'
for line in $out; do n=$((n + 1)) sizes="$sizes ${line%%[!0-9]*}"; done
unset IFS
set +f
if [ "$n" != $# ]; then
	sizes=
	for from; do out=$(LC_ALL=C du -sk]] .. excludes .. [[ -- "$from" 2>&1) || unreadable "$out"; out=$(sizes_of "$out"); sizes="$sizes ${out%%[!0-9]*}"; done
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

-- A shell command that fails with one line when a node of the job ($SLURM_JOB_NODELIST)
-- cannot make the overlay mounts a cached image's container runs on: crun, run as the user,
-- mounts a kernel overlay (with `userxattr`) in a user namespace, which Linux 5.11 was the
-- first to allow (older kernels fail the step's launch with a bare "Invalid argument").
-- Each node's kernel release is its Slurm record's (`OS=`, as slurmd reported it; scrun
-- gives the script's commands its slurm.conf, SLURM_CONF); when scontrol cannot tell, it
-- says nothing. A node list that passed is remembered in the cache ($cache/.kernels-checked-
-- <list>): a node's kernel is not downgraded, and each later container of those nodes
-- then costs slurmctld no request for it.
local kernel_check_command = [[
overlay_major=5 overlay_minor=11
checked=$cache/.kernels-checked-${SLURM_JOB_NODELIST-}
if [ -n "${SLURM_JOB_NODELIST-}" ] && [ ! -e "$checked" ] && records=$(scontrol -o show node "$SLURM_JOB_NODELIST" 2>/dev/null); then
	while read -r record; do
		node=${record#NodeName=} release=${record##* OS=Linux }
		node=${node%% *} release=${release%% *} minor=${release#*.}
		major=${release%%.*} minor=${minor%%[!0-9]*}
		case $record in *" OS=Linux "*) ;; *) continue ;; esac
		case $major.$minor in *[!0-9.]* | .* | *.) continue ;; esac
		if [ "$major" -lt "$overlay_major" ] || { [ "$major" = "$overlay_major" ] && [ "$minor" -lt "$overlay_minor" ]; }; then
			echo "node $node cannot run cached images: its kernel, Linux $release, cannot make an overlay in a user namespace (Linux $overlay_major.$overlay_minor or later can; or set image_cache = false)"
			exit 1
		fi
	done <<EOF
$records
EOF
	true 2>/dev/null >"$checked"
fi
]]

local function cache_path(user_id)
	return string.format("%s/%d/scrun-cache", scratch, math.floor(user_id))
end

-- A shell function, `remove DIR`, that removes the tree DIR. The owner's `rm -r` cannot
-- empty a directory it may not read or write: an image's read-only directories with files
-- in them (Fedora's 0550 /root), or an overlay's work/<dir>/work (mode 000, holding the
-- kernel's incompat/volatile: add_overlays), where no user namespace gives it root's powers
-- over its files (scrun run by hand, not by an engine; a node without `unshare --map-auto`).
-- It makes the tree's directories its own to enter and write first.
local remove_command = [[
remove() { rm -rf -- "$1" 2>/dev/null || { chmod -R u+rwX -- "$1" && rm -rf -- "$1"; }; }
]]

-- A shell command that removes, from the cache `$cache`, the marks `users/<id>` of the
-- containers gone from `$staging` (their staged directories), then the least recently used
-- entries in use by no one until the cache holds at most `$limit` KiB, and the entries set
-- aside as changed that no one uses any more (by `remove`: remove_command). It runs after
-- each import.
local evict_command = [[
for user in "$cache"/*/users/*; do [ -e "$user" ] && [ ! -d "$staging/${user##*/}" ] && rm -f -- "$user"; done
for used in $(ls -tr -- "$cache"/*/used 2>/dev/null); do
	size=$(du -sk -- "$cache") && [ "${size%%[!0-9]*}" -gt "$limit" ] || break
	old=${used%/used}
	(flock -n 9 && [ -z "$(ls -A -- "$old/users")" ] && remove "$old") 9>>"$old.lock"
done
for old in "$cache"/changed-*; do [ -d "$old/users" ] && [ -z "$(ls -A -- "$old/users")" ] && remove "$old"; done
for memo in "$cache"/layers/*; do [ -f "$memo" ] && [ ! -d "$cache/$(cat -- "$memo")" ] && rm -f -- "$memo"; done
]]

-- Shell functions for what may take long, for a shell that sets $notice (the site's
-- import_notice_seconds): `later WHAT` runs the shell function WHAT, which prints a line
-- for the user ("scrun: ..."), in the background once $notice seconds have passed (at once
-- for 0), unless `never` comes first; `take_lock WHAT` takes the lock open on fd 9, at once
-- or, when another container holds it, once it is free (WHAT says so meanwhile, later);
-- `size_of PATH` is what PATH holds, as the notices say it. scrun hands a line of a
-- command's output that starts with "scrun: " to the user as it comes (Slurm's scrun keeps
-- it in the output).
local notice_command = [[
later() {
	notifier=
	if [ "$notice" = 0 ]; then "$1"; return; fi
	# (killed, it ends its sleep too, and each is waited for: no process is left behind,
	# none holds the lock, no orphan is left to the anchor, the init of its pid namespace)
	(exec 9>&-; trap 'kill "$sleeper" 2>/dev/null; wait "$sleeper"; exit 0' TERM; sleep "$notice" >/dev/null 2>&1 & sleeper=$!; wait "$sleeper" && "$1") &
	notifier=$!
}
never() { [ -z "$notifier" ] || { kill "$notifier" 2>/dev/null; wait "$notifier"; }; notifier=; }
take_lock() {
	flock -n 9 && return
	later "$1"
	flock -w 3600 9
	set -- $?
	never
	return "$1"
}
size_of() {
	kib=$(du -sk -- "$1" 2>/dev/null) || return
	awk -v k="${kib%%[!0-9]*}" 'BEGIN { if (k >= 1048576) printf "%.1f GiB", k / 1048576; else printf "%d MiB", (k + 1023) / 1024 }'
}
]]

-- A shell function, `stamp DIR`: a digest of the paths, status change times and sizes of
-- DIR's files (times no one can set back), taken when an image is put in a cache: another
-- one later tells whether it changed since.
local stamp_command = [[
stamp() { (cd "$1" && find . -printf '%P\t%C@ %s\0') >"$1.stamping" && LC_ALL=C sort -z "$1.stamping" | sha256sum | cut -d' ' -f1; rm -f -- "$1.stamping"; }
]]

-- What overlays_changed compares the writable layers' own modes and owners with, and the
-- top-level directory's own and its entries': a line for each, "MODE UID GID PATH", sorted
-- (run in the staged directory). An entry the container deleted there is missing from it.
local modes_command = "find upper rootfs -maxdepth 1 ! -path upper -printf '%m %U %G %p\\n' | LC_ALL=C sort"

-- A shell command (for cache_in_command's shell: $rootfs, $cache, $staged) that sets $key,
-- the cache key of the image under $rootfs, and the shell function `remember_key`, which
-- cache_in_command runs once the key's entry is in place (it remembers the key, unless it
-- was remembered already). The
-- key is the digest of the image's listing (names, types, sizes, modes, owners, link
-- targets, and the modification times of files that hold something; /etc/passwd and
-- /etc/group left out, see cache_in_command). Listing an image walks all of it (~90 ms for
-- 30,000 files, each container). Where the engine mounted the root as an overlay (podman's
-- and docker's overlay drivers) the key is remembered, in `$cache/layers/<digest>`, for the
-- mount's image layers (its lowerdir options, on this host since its boot: another login
-- host's paths may name other layers) with the container's own writable layer as it is
-- (its listing, and the merged root's number of entries in each of its directories: an
-- opaque one hides its lower entries): a later container of the same layers and an alike
-- writable layer takes the key from there, listing only its writable layer. An engine's
-- layers do not change once made; its writable layer is the container's own. Only layers
-- in an engine's storage count (podman's and docker's overlay/l/<link> or
-- overlay/<id>/diff, containerd's snapshots/<n>/fs): a directory of the user's as a lower
-- layer (`podman run --rootfs DIR:O`) may change.
local key_command = [[
listing() { (cd "$1" && find . -mindepth 1 \( -path ./etc/passwd -o -path ./etc/group \) -o \( -type d -printf '%P\td %m %U %G\0' -o -type l -printf '%P\tl %U %G %l\0' -o -size 0 -printf '%P\t%y 0 %m %U %G\0' -o -printf '%P\t%y %s %T@ %m %U %G\0' \)); }
# the lowerdir options and the upperdir of the overlay mounted at $rootfs (mountinfo's
# octal escapes for its path), as "LOWER<tab>UPPER"; nothing for another filesystem
case $rootfs in *'\'* | *' '* | *'	'*) P=$(printf '%s' "$rootfs" | sed 's/\\/\\134/g; s/ /\\040/g; s/	/\\011/g') ;; *) P=$rootfs ;; esac
layers=$(P=$P awk '
$5 == ENVIRON["P"] { found = ""; for (i = 7; i < NF && $i != "-"; i++) ; if ($(i + 1) == "overlay") found = $(i + 3) }
END { n = split(found, o, ","); for (j = 1; j <= n; j++) if (o[j] ~ /^(lowerdir|lowerdir\+|datadir\+)=/) l = l o[j] ","; else if (o[j] ~ /^upperdir=/) u = substr(o[j], 10)
	m = split(l, p, /[=:,]/); for (j = 1; j <= m; j++) if (p[j] ~ /\// && p[j] !~ /\/overlay2?\/(l\/[^\/]+|[^\/]+\/diff)$|\/snapshots\/[0-9]+\/fs$/) l = ""
	if (l != "" && u != "") print l "\t" u }' /proc/self/mountinfo 2>/dev/null)
memo= key= remember=
upper=${layers#*	}
if [ -n "$layers" ] && [ -d "$upper" ] && read -r boot </proc/sys/kernel/random/boot_id && listing "$upper" >"$staged/upper-listing" && (cd "$upper" && find . -type d -exec sh -c 'for d; do n=$(find "$0/$d" -mindepth 1 -maxdepth 1 -printf x) || exit 1; printf "%s %s\0" "$d" "${#n}"; done' "$rootfs" {} +) >"$staged/upper-dirs"; then
	digest=$({ printf '%s\0' "$boot" "${layers%%	*}"; LC_ALL=C sort -z -- "$staged/upper-listing"; LC_ALL=C sort -z -- "$staged/upper-dirs"; } | sha256sum)
	memo=$cache/layers/${digest%% *}
	read -r key 2>/dev/null <"$memo"
	case $key in *[!0-9a-f]*) key= ;; esac
	[ ${#key} = 64 ] || key=
fi
rm -f -- "$staged/upper-listing" "$staged/upper-dirs"
if [ -z "$key" ]; then
	listing "$rootfs" >"$staged/listing" || exit 1
	key=$(LC_ALL=C sort -z -- "$staged/listing" | sha256sum | cut -d' ' -f1) && rm -f -- "$staged/listing" || exit 1
	remember=$memo
fi
remember_key() { [ -z "$remember" ] || { mkdir -p -- "$cache/layers" && printf '%s\n' "$key" >"$remember.$$" && mv -f -- "$remember.$$" "$remember"; } || rm -f -- "$remember.$$"; }
]]

-- A shell command (run in a subshell of stage_command's, with its $keep) that stages
-- `rootfs` (the engine's root filesystem) through the image cache `cache` into `staged`
-- (<...>/<id>, for the container <id>); it exits 10, having done nothing, when the scratch cannot
-- hold an overlay's writable layer. It writes `staged`/overlays, a line for each top-level
-- directory of the image ("MODE UID GID NAME"), each to be an overlay mount (its lower
-- layer ENTRY/rootfs/NAME, its writable layer and work directory `staged`/upper/NAME and
-- `staged`/work/NAME), copies the image's other top-level entries to `staged`/rootfs, and
-- writes the entry's path to `staged`/cache-entry, last.
-- An entry's key (key_command) is a digest of the image's listing (names, types, sizes,
-- modes, owners, link targets, and the modification times of files that hold something:
-- the engine's own empty files and links, made anew for each container, do not count): a
-- changed image gets a new entry. /etc/passwd and /etc/group do not count either: the engine writes the user
-- into them for each container (podman's --userns=keep-id, --user); the container's own
-- go to its writable layer. It is imported under a lock per key, into <key>.tmp, renamed into place once
-- whole: a container that waited for the lock uses it, an import killed half way is never
-- used. Its `stamp`, a digest of its files' status change times, tells an entry changed
-- after its import (it is then set aside, and the image imported again). `users/<id>`
-- marks an entry in use; after an import the least recently used entries in use by no one
-- are removed (evict_command). An import, or a wait for another container's, that takes
-- longer than `import_notice_seconds` tells the user so (notice_command).
local function cache_in_command(rootfs, cache, staged, limit_kib)
	return "rootfs=" .. quote(rootfs) .. " cache=" .. quote(cache) .. " staged=" .. quote(staged)
		.. " limit=" .. math.floor(limit_kib) .. " notice=" .. math.floor(import_notice_seconds) .. "\n" .. notice_command .. remove_command .. [[
id=${staged##*/}
case $(stat -f -c %T -- "$staged") in
ext2/ext3 | xfs | btrfs | tmpfs) ;;
*) exit 10 ;;
esac
if [ ! -w "$cache" ]; then
	out=$(touch -- "$cache/.written" 2>&1) && rm -f -- "$cache/.written"
	echo "the image cache $cache cannot be written: ${out##*: }"
	exit 1
fi
]] .. kernel_check_command .. stamp_command .. [[
]] .. key_command .. [[
entry=$cache/$key
waiting() { echo "scrun: waiting for another container's import of this image"; }
exec 9>>"$entry.lock" && take_lock waiting || { echo "cannot lock $entry.lock"; exit 1; }
if [ -d "$entry" ] && [ "$(stamp "$entry/rootfs")" != "$(cat -- "$entry/stamp" 2>/dev/null)" ]; then
	echo "scrun: the cached image $entry changed after its import: importing it again" >&2
	mv -- "$entry" "$cache/changed-$key-$$" || exit 1
fi
imported=
if [ ! -d "$entry" ]; then
	remove "$entry.tmp"
	importing() { shown=$(size_of "$rootfs") && echo "scrun: importing image ($shown) to the cache"; }
	later importing
	{ mkdir -m 700 -- "$entry.tmp" "$entry.tmp/users" && cp -RP --preserve="$keep" -- "$rootfs/." "$entry.tmp/rootfs" && stamp "$entry.tmp/rootfs" >"$entry.tmp/stamp" && mv -T -- "$entry.tmp" "$entry"; }
	done=$?
	never
	[ "$done" = 0 ] || { remove "$entry.tmp"; exit 1; }
	imported=1
fi
: >"$entry/users/$id" && touch -- "$entry/used" || exit 1
exec 9>&-
remember_key
if [ -n "$imported" ]; then
	staging=${staged%/*}
]] .. evict_command .. [[
fi
cd -- "$entry/rootfs" && mkdir -m 700 -- "$staged/rootfs" "$staged/upper" "$staged/work" || exit 1
chmod --reference=. -- "$staged/rootfs" && chown --reference=. -- "$staged/rootfs" || exit 1
# a name an overlay's options cannot hold (",", ":", "\\", a newline) is copied whole
find . -mindepth 1 -maxdepth 1 \( ! -type d -o -name '*[,:\\]*' -o -name '*
*' \) -exec cp -RP --preserve="$keep" -t "$staged/rootfs" -- {} + || exit 1
find . -mindepth 1 -maxdepth 1 -type d ! -name '*[,:\\]*' ! -name '*
*' -printf '%m %U %G %P\n' >"$staged/overlays" || exit 1
# the writable layers, and the mount points they go on: the image's top-level directories,
# empty, with their modes, owners and times (one tar to another: an `install -d` each took
# ~3 ms). A mount point's mode is what crun's tmpcopyup gives a tmpfs the engine mounts
# there (podman's /tmp of a --read-only container: the image's 1777, not mkdir's 755)
set --
while read -r mode uid gid name; do set -- "$@" "./$name"; done <"$staged/overlays"
[ $# = 0 ] || for to in "$staged/upper" "$staged/rootfs"; do
	tar --numeric-owner --no-recursion -cf - -- "$@" | tar --numeric-owner --same-owner --same-permissions -xf - -C "$to" || exit 1
done
set --
while read -r mode uid gid name; do set -- "$@" "$staged/work/$name"; done <"$staged/overlays"
[ $# = 0 ] || mkdir -- "$@" || exit 1
set --
for name in etc/passwd etc/group; do
	if [ -f "$rootfs/$name" ] && [ ! -L "$rootfs/$name" ] && [ -d "$staged/upper/etc" ]; then set -- "$@" "$rootfs/$name"; fi
done
[ $# = 0 ] || cp -P --preserve="$keep" -t "$staged/upper/etc" -- "$@" || exit 1
echo "$entry" >"$staged/cache-entry"]]
end

-- The overlay mounts that make the container's root of a cached image: one per top-level
-- directory `dirs` of ENTRY/rootfs, put first in the config's mounts (the engine's own,
-- /proc, /dev, /etc/hosts..., go on top of them). A directory the config mounts over whole
-- gets none. A read-only root (`podman run --read-only`, root.readonly) has them read-only:
-- crun makes the root itself read-only, not the mounts on it. They are `volatile`: the
-- kernel skips their syncs, above all the one of the writable layer's whole filesystem
-- when the container's last process exits and its mounts go, which waited for everything
-- written there and not yet on disk (after a first container's copy of a 2 GiB image to
-- the node, most of a second of its end). The writable layer lives only as long as its
-- container, and stage-out reads it from the page cache as any file; the kernel leaves
-- work/<dir>/work/incompat/volatile behind, which remove_command removes.
local function add_overlays(config, entry, staged, dirs)
	local read_only = type(config["root"]) == "table" and config["root"]["readonly"] == true
	local covered = {}
	for _, mount in ipairs(config["mounts"] or {}) do
		covered[mount["destination"]] = true
	end
	local mounts = {}
	for _, dir in ipairs(dirs) do
		if not covered["/" .. dir] then
			local options = {
				"lowerdir=" .. entry .. "/rootfs/" .. dir,
				"upperdir=" .. staged .. "/upper/" .. dir,
				"workdir=" .. staged .. "/work/" .. dir,
				"userxattr",
				"volatile",
			}
			if read_only then
				table.insert(options, "ro")
			end
			table.insert(mounts, { destination = "/" .. dir, type = "overlay", source = "overlay", options = options })
		end
	end
	for _, mount in ipairs(config["mounts"] or {}) do
		table.insert(mounts, mount)
	end
	config["mounts"] = mounts
end

-- A shell condition, true when anything in `paths` (quoted, space-separated, with find's
-- tests after them if any; relative to the directory `at` when given) changed status after
-- the mark `mark`, or when that cannot be told: find fails, the mark is missing, or its
-- time is whole seconds (a filesystem's; a write in the mark's second would look older
-- than it). Most containers change nothing in their root filesystem: then nothing needs to
-- be compared or copied back.
local function changed_since(paths, mark, at)
	local cd = at and ("cd " .. quote(at) .. " && ") or ""
	return "! changed=$(" .. cd .. "find " .. paths .. " -cnewer " .. quote(mark) .. " -print -quit 2>&1) || [ -n \"$changed\" ]"
		.. " || ! since=$(stat -c %y -- " .. quote(mark) .. ") || [ \"${since#*.000000000}\" != \"$since\" ]"
end

-- A shell command that removes, from the root filesystem a container ran on, the mount
-- points crun made there on the node for Slurm's own mounts of the step: Slurm 23.02 and
-- later bind-mount the step's spool directory at its own path (oci.conf's MountSpoolDir
-- by default; its last name is oci-job<job>-<step>), Slurm 24.11 at /var/run/slurm. Each
-- is an empty directory of job `job_id` born after the mark `mark`; it goes with the
-- directories above it that were born after the mark too and are empty then, unless the
-- image `lower` ("" for none) has one there with another mode or owner (an overlay's copy
-- of the image's directory is removed, the image's own shows through). It looks in
-- `roots` (quoted, space-separated names in the directory `at`): a whole copy's root, or
-- a cached image's writable layers (`upper`, whose entries mirror the image's top-level
-- directories) and top-level directory (`rootfs`). So a container that changed nothing
-- else leaves its root as stage-in made it, and `podman diff` lists what it lists through
-- crun. A directory whose birth time its filesystem does not keep stays (and is copied
-- back).
local function slurms_mount_points_command(roots, mark, lower, job_id, at)
	return "(cd " .. quote(at) .. " && since=$(stat -c %.9Y -- " .. quote(mark) .. ") || exit 0\n"
		.. "since=${since%.*}${since#*.} lower=" .. quote(lower) .. "\n"
		.. "for root in " .. roots .. "; do find \"$root\" -mindepth 1 -type d ! -cnewer " .. quote(mark) .. " -prune -o -type d -empty"
		.. " \\( -name 'oci-job" .. math.floor(job_id) .. "-[0-9]*' -o -path \"$root/var/run/slurm\" -o -path \"$root/run/slurm\" \\) -print; done |\n" .. [[
while IFS= read -r path; do
	while case $path in */*) true ;; *) false ;; esac; do
		set -- $(stat -c '%.9W %a %u %g' -- "$path")
		[ "${1%.*}${1#*.}" -gt "$since" ] || break
		rel=${path#*/}
		if [ -n "$lower" ] && { [ -e "$lower/$rel" ] || [ -L "$lower/$rel" ]; }; then
			[ "$2 $3 $4" = "$(stat -c '%a %u %g' -- "$lower/$rel")" ] || break
		fi
		rmdir -- "$path" || break
		path=${path%/*}
	done
done) 2>/dev/null
]]
end

-- A shell condition, true when the container may have changed the root filesystem it ran
-- on from the cached image, staged in `dir` (`dir`/upper: the overlays' writable layers,
-- `dir`/rootfs: its root, with the image's top-level files) after the mark
-- `dir`/rootfs.since: an entry below a writable layer, or of rootfs, changed status after
-- it (what the container writes, and a whiteout for what it deletes, is a new entry there;
-- a writable layer's own status-change time tells nothing: mounting an overlay sets
-- attributes on it); a writable layer's own mode or owner is not what `dir`/upper.modes
-- recorded before the mark; or that cannot be told (changed_since).
local function overlays_changed(dir)
	return changed_since("upper rootfs \\( -path 'upper/*/*' -o -path 'rootfs/*' \\)", dir .. "/rootfs.since", dir)
		.. " || ! (cd " .. quote(dir) .. " && " .. modes_command .. " | cmp -s - upper.modes)"
end

-- A shell command that brings what a container of a cached image changed back to the
-- engine's root filesystem `orig`: its writable layers (`staged`/upper/<dir>) with the
-- overlay's deletions (whiteouts: character devices 0/0; opaque directories: the
-- user.overlay.opaque attribute) applied, and the top-level files (`staged`/rootfs) it made or
-- changed, or the engine's root lacks (the others may have been written there meanwhile); then
-- it marks the cache `entry` unused by `id`. When nothing in the writable layers and the
-- top-level files changed after stage-in's mark (`staged`/rootfs.since), only the mark of
-- use goes: that saves a Python and an rsync start (~60 ms).
local function cache_out_command(staged, entry, orig, id)
	return "staged=" .. quote(staged) .. " entry=" .. quote(entry) .. " orig=" .. quote(orig) .. " id=" .. quote(id) .. "\n"
		.. "if ! { " .. changed_since(quote(staged .. "/upper") .. " " .. quote(staged .. "/rootfs"), staged .. "/rootfs.since") .. "; }; then\n"
		.. "\texec rm -f -- " .. quote(entry .. "/users/" .. id) .. "\nfi\n" .. [[
python3 - "$staged" "$entry/rootfs" "$orig" <<'PY' || exit 1
import os, shutil, stat, sys
staged, lower, orig = sys.argv[1:]
upper = os.path.join(staged, "upper")
def remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)
for top, dirs, files in os.walk(upper):
    target = os.path.join(orig, os.path.relpath(top, upper))
    try:
        opaque = os.getxattr(top, "user.overlay.opaque") == b"y"
    except OSError:
        opaque = False
    if opaque and top != upper and os.path.isdir(target):
        for name in set(os.listdir(target)) - set(dirs) - set(files):
            remove(os.path.join(target, name))
    for name in files:
        path = os.path.join(top, name)
        status = os.lstat(path)
        if stat.S_ISCHR(status.st_mode) and status.st_rdev == 0:
            remove(os.path.join(target, name))
            os.unlink(path)
root = os.path.join(staged, "rootfs")
overlaid = set(os.listdir(upper))
for name in set(os.listdir(lower)) - set(os.listdir(root)):
    remove(os.path.join(orig, name))
# a top-level entry goes back when the container made or changed it (its status, or one's
# below it, changed after stage-in's mark), or when the engine's root lacks it: one that
# stage-in copied and the container left alone stays as the engine's root has it now,
# which may have been written meanwhile (`create`'s stdout, a file inside the root)
since = os.stat(os.path.join(staged, "rootfs.since")).st_mtime_ns
def changed(path):
    if since % 1000000000 == 0 or os.lstat(path).st_ctime_ns > since:
        return True  # (a mark without its fraction of a second cannot tell)
    if os.path.islink(path) or not os.path.isdir(path):
        return False
    for top, dirs, files in os.walk(path):
        if any(os.lstat(os.path.join(top, n)).st_ctime_ns > since for n in dirs + files):
            return True
    return False
for name in set(os.listdir(root)) - overlaid:
    path = os.path.join(root, name)
    if not os.path.lexists(os.path.join(orig, name)) or changed(path):
        os.rename(path, os.path.join(upper, name))
PY
chmod --reference="$staged/rootfs" -- "$staged/upper" && chown --reference="$staged/rootfs" -- "$staged/upper" || exit 1
# run as a user, rsync keeps no owner, and no group either: it would give the directories
# it updates the user's (a --userns=keep-id container's are its root's, a subordinate id's);
# nor directories' times: the writable layers' own are stage-in's, and a directory the
# container changed has its time from what changed in it, as through crun; times to the
# nanosecond: rsync's whole seconds would skip a file rewritten at its size within the
# second of its last write
owners=--no-g
[ "$(id -u)" != 0 ] || owners=
rsync -a -H --omit-dir-times --modify-window=-1 --numeric-ids $owners -- "$staged/upper/" "$orig/" || exit 1
rm -f -- "$entry/users/$id"]]
end

-- A shell command (for stage_command's shell) that stages the root filesystem `rootfs` to
-- `dir`/rootfs: through the image cache `cache` where the scratch allows, else (or without
-- a cache) as a copy of its own.
local function root_command(rootfs, dir, cache)
	local copy = "try 'copying the root filesystem' " .. copy_command .. " " .. quote(rootfs .. "/.") .. " " .. quote(dir .. "/rootfs") .. "\n"
		.. "find " .. quote(dir .. "/rootfs") .. " -mindepth 1 -printf '%P\\0' >" .. quote(dir .. "/rootfs.carried") .. " || exit 1\n"
	if cache == nil then
		return copy
	end
	return "(" .. private_dir_command(scratch, cache, true) .. "\n" .. cache_in_command(rootfs, cache, dir, cache_limit_mib * 1024)
		.. ")\ncached=$?\ncase $cached in 0) ;; 10) " .. copy .. ";; *) exit $cached ;; esac\n"
end

-- A shell command (for stage_command's shell, after the root filesystem was staged into
-- `dir`) that makes the mount points of `config`'s mounts one or two levels below the root
-- that a cached image lacks, as crun would make them on the node (a directory, or an empty
-- file for a bind mount of a file), before stage-in's mark: the engine's /etc/hosts,
-- /etc/hostname, /etc/resolv.conf, a `-v DIR:/out`'s /out. So a container that changed
-- nothing leaves its writable layers as stage-in made them (overlays_changed), and one that
-- did brings them back to the engine's root filesystem, as through crun. Nothing without a
-- cached image (`dir`/cache-entry); deeper mount points crun makes itself.
local function mount_points_command(dir, config)
	local words, mounted = "", {}
	for _, mount in ipairs(config["mounts"] or {}) do
		mounted[mount["destination"] or ""] = true
	end
	for _, mount in ipairs(config["mounts"] or {}) do
		local path = mount["destination"]
		if type(path) == "string" and (string.match(path, "^/[^/]+$") or string.match(path, "^/[^/]+/[^/]+$"))
			and not string.match(path, "/%.%.?/") and not string.match(path, "/%.%.?$")
			and not mounted[string.match(path, "^(/[^/]+)/")] then -- not below another mount (/dev/pts)
			local bind = mount["type"] == "bind" or has_option(mount, "bind") or has_option(mount, "rbind")
			words = words .. " " .. quote(string.sub(path, 2)) .. " " .. quote(bind and mount["source"] or "")
		end
	end
	if words == "" then
		return ""
	end
	return "if [ -e " .. quote(dir .. "/cache-entry") .. " ]; then\n"
		.. "\tstaged=" .. quote(dir) .. "\n\tread -r entry <\"$staged/cache-entry\" || exit 1\n"
		.. "\tset --" .. words .. "\n" .. [[
	while [ $# -gt 1 ]; do
		path=$1 source=$2
		shift 2
		top=${path%%/*}
		case $path in
		*/*) if [ -d "$staged/upper/$top" ]; then
				[ ! -e "$entry/rootfs/$path" ] && [ ! -L "$entry/rootfs/$path" ] || continue
				at=$staged/upper/$path
			else # a directory the image lacks (podman's /run of /run/.containerenv)
				[ -e "$staged/rootfs/$top" ] || [ -L "$staged/rootfs/$top" ] || mkdir -- "$staged/rootfs/$top" || exit 1
				[ -d "$staged/rootfs/$top" ] && [ ! -L "$staged/rootfs/$top" ] || continue
				at=$staged/rootfs/$path
			fi ;;
		*) at=$staged/rootfs/$path ;;
		esac
		[ ! -e "$at" ] && [ ! -L "$at" ] || continue
		if [ -z "$source" ] || [ -d "$source" ]; then mkdir -- "$at"; else true >"$at"; fi || exit 1
	done
fi
]]
end

-- The host uid and gid ("UID:GID") that `config` maps the container's root to, when root's
-- engine maps it to another (podman's --uidmap or --userns=auto, docker's userns-remap):
-- crun, run as root on the node, then sets the container up in a user namespace as that
-- uid, which must reach the container's staged files. nil for a container run as root.
local function mapped_root(config)
	local function host_id(mappings)
		for _, mapping in ipairs(mappings or {}) do
			local inside, outside, size = mapping["containerID"], mapping["hostID"], mapping["size"]
			if type(inside) == "number" and type(outside) == "number" and type(size) == "number"
				and inside <= 0 and 0 < inside + size then
				return outside - inside
			end
		end
		return 0
	end
	local linux = config["linux"] or {}
	local uid, gid = host_id(linux["uidMappings"]), host_id(linux["gidMappings"])
	if uid == 0 and gid == 0 then
		return nil
	end
	return string.format("%d:%d", uid, gid)
end

-- A shell command that lets `owner` ("UID:GID", from mapped_root; nil: nothing to do) reach
-- the container staged in `dir`, whose image's cache entry, if any, is in `cache`: the
-- directories `passable` and `cache` (the user's, on the way there) become passable (mode
-- 0711: no one else can list them), and the directories that staging made for this
-- container, and its image's cache entry, become `owner`'s (mode 0700: no one else can
-- enter them), as the engine's own storage does.
local function hand_over_command(dir, owner, cache, passable)
	if owner == nil then
		return ""
	end
	local words = ""
	for _, path in ipairs(passable) do
		words = words .. " " .. quote(path)
	end
	return "\ndir=" .. quote(dir) .. " owner=" .. quote(owner) .. " cache=" .. quote(cache) .. "\nset --" .. words .. "\n" .. [[
if [ -e "$dir/cache-entry" ]; then
	read -r entry <"$dir/cache-entry" && chown -- "$owner" "$cache/${entry##*/}" || exit 1
	set -- "$@" "$cache"
fi
chmod 711 -- "$@" || exit 1
set -- "$dir"
for d in "$dir/upper" "$dir/work" "$dir"/work/* "$dir/mounts"; do
	[ ! -d "$d" ] || [ -L "$d" ] || set -- "$@" "$d"
done
chown -- "$owner" "$@" || exit 1
]]
end

-- The one shell command of stage-in on the login host (each process it saves is a few ms
-- of every container's start): `dir` made safely (private_dir_command), the root
-- filesystem `rootfs` copied to `dir`/rootfs, the bind mounts `mounts` carried to their
-- copies (carry_in_command), and the marks touched. With `cache` (the user's image cache),
-- the root filesystem goes through it (cache_in_command) where the scratch allows, and
-- `points` (mount_points_command) makes the mount points it lacks.
local function stage_command(rootfs, dir, mounts, cache, points)
	local mkdir = ""
	if #mounts > 0 then
		mkdir = "mkdir -m 700 -- " .. quote(dir .. "/mounts") .. " || exit 1\n"
	end
	return private_dir_command(scratch, dir, true) .. "\n" .. keep_command .. try_command .. root_command(rootfs, dir, cache)
		.. points .. mkdir .. carry_in_command(mounts, carry_limit_mib * 1024, dir .. "/rootfs.since")
end

-- A node's shell command (run in a subshell of node_copy_command's, with its $keep) that
-- copies the scratch's cache entry `entry` to the node's cache `cache` (<cache>/<key>, the
-- same key), once: under a lock per key on the node, into <key>.tmp, renamed into place
-- once whole, with its `node-stamp` (stamp_command, of the copy: an entry whose `stamp` is
-- not the scratch entry's, which was imported again, or that changed after its copy, is set
-- aside first); then marks it in use by the container of `here` (`users/<id>`) and,
-- after an import, keeps the node's cache to `limit_kib` (evict_command). A copy, or a
-- wait for another container's, that takes longer than `import_notice_seconds` tells the
-- user so, naming the node.
local function node_cache_command(entry, cache, here, limit_kib)
	return "entry=" .. quote(entry) .. " cache=" .. quote(cache) .. " here=" .. quote(here)
		.. " limit=" .. math.floor(limit_kib) .. " notice=" .. math.floor(import_notice_seconds) .. "\n" .. notice_command .. remove_command .. stamp_command .. [[
id=${here##*/} key=${entry##*/}
copy=$cache/$key node=${SLURMD_NODENAME:-$(hostname)}
waiting() { echo "scrun: waiting for another container's copy of this image to node $node"; }
exec 9>>"$copy.lock" && take_lock waiting || { echo "cannot lock $copy.lock"; exit 1; }
if [ -d "$copy" ] && [ "$(cat -- "$copy/stamp" 2>/dev/null)" != "$(cat -- "$entry/stamp")" ]; then
	mv -- "$copy" "$cache/changed-$key-$$" || exit 1
elif [ -d "$copy" ] && [ "$(stamp "$copy/rootfs")" != "$(cat -- "$copy/node-stamp" 2>/dev/null)" ]; then
	echo "scrun: the copy of the cached image on node $node changed after it was made: copying it again"
	mv -- "$copy" "$cache/changed-$key-$$" || exit 1
fi
imported=
if [ ! -d "$copy" ]; then
	mine rm -rf -- "$copy.tmp"
	copying() { shown=$(size_of "$entry/rootfs") && echo "scrun: copying image ($shown) to node $node"; }
	later copying
	{ mkdir -m 700 -- "$copy.tmp" "$copy.tmp/users" && mine cp -RP --preserve="$keep" -- "$entry/rootfs" "$entry/stamp" "$copy.tmp/" && stamp "$copy.tmp/rootfs" >"$copy.tmp/node-stamp" && mv -T -- "$copy.tmp" "$copy"; }
	done=$?
	never
	[ "$done" = 0 ] || { mine rm -rf -- "$copy.tmp"; exit 1; }
	imported=1
fi
: >"$copy/users/$id" && touch -- "$copy/used" || exit 1
exec 9>&-
# (the eviction's failures are no container's: it exits 0)
[ -n "$imported" ] || exit 0
staging=${here%/*}
]] .. evict_command .. "exit 0"
end

-- The part of node_copy_command that brings the scratch's cache entry `entry` (nil: the
-- container was copied whole) to the node's cache (node_cache_command), on a safe path.
local function node_cache_in(entry, here, user_id)
	if entry == nil then
		return ""
	end
	local cache = node_cache_path(user_id)
	return "(" .. private_dir_command(node_local, cache, true) .. "\n" .. node_cache_command(entry, cache, here, cache_limit_mib * 1024)
		.. ") || exit 1\n"
end

-- A shell function for a node's command, after keep_command: `mine COMMAND...` runs COMMAND
-- as the user's root in a user namespace of its own (unshare --map-root-user; root's as it
-- is, its $keep keeps the owners). What a node copies from the scratch is the user's, but
-- the user alone can neither read an image's files of mode 0000 (/etc/shadow) nor remove
-- its read-only directories with files in them (Fedora's 0550 /root).
local mine_command = [[
mine() { case $keep in *ownership) "$@" ;; *) unshare --map-root-user -- "$@" ;; esac; }
]]

-- A node's shell command that copies the carried bundle `carry` to `here`, made safely
-- (private_dir_command), after the image's cache entry `entry` when there is one
-- (node_cache_in), both copies `mine`. The copy is new there: the marks of the root
-- filesystem and of each bind mount's copy are touched again after it. Then the copy is
-- handed over to `owner`, a root's container's mapped root (hand_over_command).
local function node_copy_command(carry, here, entry, user_id, owner)
	local modes = ""
	if entry ~= nil then  -- what overlays_changed compares with, as this node copied them
		modes = " && (cd " .. quote(here) .. " && " .. modes_command .. " >upper.modes)"
	end
	return private_dir_command(node_local, here, true) .. "\n" .. keep_command .. mine_command .. node_cache_in(entry, here, user_id)
		.. "mine " .. copy_command .. " " .. quote(carry .. "/.") .. " " .. quote(here .. "/") .. modes
		.. " && set -- " .. quote(here .. "/mounts") .. "/*.since && { [ -e \"$1\" ] || set --; }"
		.. " && touch -- " .. quote(here .. "/rootfs.since") .. " \"$@\" || exit 1"
		.. hand_over_command(here, owner, node_cache_path(user_id), { string.match(here, "^(.*)/") })
end

-- A shell function: `changed_list COPY MARK` writes `COPY.changed`, the entries of the copy
-- COPY whose status changed after MARK was touched, NUL-separated (a directory's own, when
-- it changed, as an empty name: a deletion there; a file's: "x" when it did), as
-- carry_back_command reads them; empty when the container changed nothing. Where the
-- filesystem keeps whole seconds only (the mark's time has no fraction: Lustre's), a change
-- within the mark's second is not newer than it: every entry is listed then.
local changed_list_function = [[
changed_list() {
	t=$(stat -c %y -- "$2") || return 1
	if [ -d "$1" ] && [ ! -L "$1" ]; then
		if [ "${t#*.000000000}" != "$t" ]; then find "$1" -printf '%P\0'; else find "$1" -cnewer "$2" -printf '%P\0'; fi >"$1.changed"
	elif [ "${t#*.000000000}" != "$t" ]; then
		printf x >"$1.changed"
	else
		find "$1" -maxdepth 0 -cnewer "$2" -printf x >"$1.changed"
	fi
}
]]

-- A shell command (a subshell) that writes, beside each bind mount's copy in `mounts`,
-- `<copy>.changed` (changed_list).
local function changed_lists_command(mounts)
	return "(" .. changed_list_function .. "for since in " .. quote(mounts) .. [[/*.since; do
	[ -e "$since" ] || continue
	changed_list "${since%.since}" "$since" || exit 1
done)]]
end

-- A shell command that copies back into the bind mount source `source` what the container
-- changed in its copy `copy`: first the deletions of what was carried (so that a directory
-- it replaced with a file, or the reverse, is gone first), then the entries `copy.changed`
-- lists (written by changed_lists_command where it ran) and every entry whose path was not
-- carried (a renamed directory's contents keep their times); nothing else, so what others
-- wrote to `source` meanwhile stays (two containers of one `-v DIR`: both one's and the
-- other's writes). Nothing runs when it changed nothing. A failure sets `failed`.
-- `dir_times` false: directories keep the times `source` gives them (a root's, below).
local function carry_back_command(copy, source, dir_times)
	local changed = quote(copy .. ".changed")
	return "if [ ! -f " .. changed .. " ] || [ -s " .. changed .. " ]; then (copy=" .. quote(copy) .. " source=" .. quote(source)
		.. " times=" .. (dir_times == false and "--omit-dir-times" or "--times") .. "\n" .. [[
if [ ! -f "$copy.changed" ]; then echo "no list of what the container changed in $copy"; exit 1; fi
# Run as a user, nothing sets a group: what the container made takes the one its directory
# gives it (a setgid directory's), and a file keeps its own, as through crun. What another
# user owns (a root-owned file the user may write) gets its contents only, and the time of
# the write, as through crun: only its owner may set its time or mode.
me=$(id -u) owners=--no-g
[ "$me" != 0 ] || owners=
if [ -f "$copy" ] && [ ! -L "$copy" ]; then
	keep=--preserve=mode,timestamps
	[ "$me" != 0 ] || keep=$keep,ownership
	[ "$me" = 0 ] || [ ! -e "$source" ] || [ -O "$source" ] || keep=
	exec cp -P $keep -- "$copy" "$source"
elif [ ! -d "$copy" ] || [ -L "$copy" ]; then
	exec rsync -a -H --numeric-ids --inplace $owners -- "$copy" "$source"
fi
# (find's own failure, an entry it could not read, fails the copy: a list short of it
# would delete that entry from the source)
find "$copy" -mindepth 1 -printf '%P\0' >"$copy.found" || exit 1
sort -z "$copy.found" >"$copy.now" || exit 1
sort -z "$copy.carried" >"$copy.was" || exit 1
comm -z -23 "$copy.was" "$copy.now" | xargs -0 -r -I{} rm -rf -- "$source/{}" || exit 1
comm -z -13 "$copy.was" "$copy.now" | cat "$copy.changed" - | sort -z -u >"$copy.send" || exit 1
: >"$copy.theirs"
if [ "$me" != 0 ]; then
	# (find names each path it cannot find, a new one: those are the user's to make)
	(cd "$source" && find -files0-from "$copy.send" -maxdepth 0 ! -user "$me" -print0 2>/dev/null) | sort -z >"$copy.theirs"
	comm -z -23 "$copy.send" "$copy.theirs" >"$copy.mine" && mv -- "$copy.mine" "$copy.send" || exit 1
fi
# (-I: each was made or changed there; rsync's own check, size and whole-second time,
# would skip a file rewritten at its size within the second of its last write)
rsync -a $times -I -H --no-implied-dirs --numeric-ids --inplace $owners --from0 --files-from="$copy.send" -- "$copy/" "$source/" || exit 1
[ ! -s "$copy.theirs" ] || rsync -a -H -I --no-t --no-g --no-implied-dirs --numeric-ids --inplace --from0 --files-from="$copy.theirs" -- "$copy/" "$source/") || failed=1; fi
]]
end

-- A shell command that makes the carried copy `to` of the root filesystem the node's copy
-- `from` (both scrun's own) when the container changed anything in it after the mark
-- `from.since` (changed_since): what is unchanged is not copied again. Without Slurm's
-- mount points (of the job `job_id`: slurms_mount_points_command), nor directories' times
-- (a directory the container changed has its time from what changed in it, as through
-- crun). A failure sets `failed`.
local function root_back_command(from, to, job_id)
	local at, name = string.match(from, "^(.*)/([^/]+)$")
	return slurms_mount_points_command(quote(name), name .. ".since", "", job_id, at) .. "if " .. changed_since(quote(from), from .. ".since") .. "; then\n"
		.. "\tout=$(rsync -a -H --omit-dir-times --modify-window=-1 --numeric-ids --delete -- " .. quote(from .. "/") .. " " .. quote(to .. "/") .. " 2>&1)"
		.. " || { echo \"copying the root filesystem back failed (exit $?): $out\"; failed=1; }\nfi\n"
end

-- A shell command that brings back to the engine's root filesystem `to` what the container
-- changed in its whole copy `from` after the mark `from.since` (carry_back_command, with
-- the list of what stage-in copied, `from.carried`): what it made, changed and deleted;
-- nothing else, so what the engine or others wrote to `to` meanwhile stays (`create`'s
-- stdout in a file inside the root, a file `podman cp` put there). Slurm's mount points
-- (of the job `job_id`: slurms_mount_points_command) go first; directories' times do not
-- come back (a directory the container changed has its time from what changed in it, as
-- through crun). Nothing runs when it changed nothing (changed_since). A failure sets
-- `failed`.
local function root_changes_back_command(from, to, job_id)
	local at, name = string.match(from, "^(.*)/([^/]+)$")
	return slurms_mount_points_command(quote(name), name .. ".since", "", job_id, at) .. "if " .. changed_since(quote(from), from .. ".since") .. "; then\n"
		.. changed_list_function .. "\tif changed_list " .. quote(from) .. " " .. quote(from .. ".since") .. "; then\n"
		.. carry_back_command(from, to, false)
		.. "\telse echo " .. quote("cannot list what the container changed in " .. from) .. "; failed=1; fi\nfi\n"
end

-- A node's shell command (node 0's) that copies what the container changed in its root
-- filesystem `root_path` back to the carried bundle `carry`: its writable layers
-- (`bundle`/upper, with the overlay's whiteouts and opaque directories' attributes) and
-- its top-level files, when it ran on a cached image (`entry`, as the user `user_id`'s
-- node cache holds it) and changed anything there (overlays_changed: `bundle` is the
-- node's copy, its root `root_path`); else the whole root filesystem, when it changed
-- anything there (root_back_command). Slurm's mount points (of the job `job_id`) go first
-- (slurms_mount_points_command). Times are compared to the nanosecond (rsync's whole
-- seconds would skip a file rewritten at its size within the second of its last write), as
-- for the bind mounts' copies below. A failure sets `failed`.
local function node_back_command(entry, bundle, root_path, carry, user_id, job_id)
	if entry == nil then
		return root_back_command(root_path, carry .. "/rootfs", job_id)
	end
	local lower = node_cache_path(user_id) .. "/" .. string.match(entry, "[^/]*$") .. "/rootfs"
	return slurms_mount_points_command("upper rootfs", "rootfs.since", lower, job_id, bundle)
		.. "if " .. overlays_changed(bundle) .. "; then\n"
		.. "\tout=$(rsync -a -H -X --modify-window=-1 --numeric-ids --delete -- " .. quote(bundle .. "/upper/") .. " " .. quote(carry .. "/upper/")
		.. " 2>&1 && rsync -a -H --modify-window=-1 --numeric-ids --delete -- " .. quote(root_path .. "/") .. " " .. quote(carry .. "/rootfs/") .. " 2>&1)"
		.. " || { echo \"copying the root filesystem back failed (exit $?): $out\"; failed=1; }\nfi\n"
end

-- A shell command that brings what the container changed in its root filesystem back to
-- the engine's `orig`: its writable layers, when it ran on the cache `entry`
-- (cache_out_command; `staged` is its bundle); else what it changed in its whole copy
-- `root_path` (root_changes_back_command). A failure sets `failed`.
local function changes_back_command(entry, staged, root_path, orig, id, job_id)
	-- (nothing when the engine's root filesystem is gone: it removed the container before
	-- a late stage-out, `scrun delete`'s after an outage of slurmctld; the mark goes)
	local gone = "if [ ! -d " .. quote(orig) .. " ]; then\n"
	if entry == nil then
		return gone .. ":\nelse\n" .. root_changes_back_command(root_path, orig, job_id) .. "fi\n"
	end
	return gone .. "rm -f -- " .. quote(entry .. "/users/" .. id) .. "\nelse\n"
		.. "out=$( (" .. cache_out_command(staged, entry, orig, id) .. ") 2>&1)"
		.. " || { echo \"copying the root filesystem back failed (exit $?): $out\"; failed=1; }\nfi\n"
end

function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	id = file_name(id) -- what the paths below are named after
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
	local points = mount_points_command(carry, config) -- with the mounts' own sources
	local mounts = {}
	carried_in = carried_mounts(config)
	for _, carried in ipairs(carried_in) do
		local copy = string.format("%s/mounts/%d", carry, carried.index)
		table.insert(mounts, { index = carried.index, source = carried.source, copy = copy, skip = inner_scratch(carried.source) })
		config["mounts"][carried.index]["source"] = string.format("%s/mounts/%d", here, carried.index)
	end
	local cache = nil
	if image_cache then
		cache = cache_path(user_id)
	end
	local command = stage_command(rootfs, carry, mounts, cache, points)
	local shm = shm_mount(config)
	if shm ~= nil then
		command = command .. shm_size_command(config["mounts"][shm]["source"], carry .. "/shm-size")
	end
	if not run("staging into " .. carry, command, "the scratch " .. scratch) then
		return slurm.ERROR
	end
	read_only_copies(config, mounts)
	if shm ~= nil then
		config["mounts"][shm] = shm_tmpfs(config["mounts"][shm], read_lines(carry .. "/shm-size")[1])
	end
	local entry = read_lines(carry .. "/cache-entry")[1]
	if entry ~= nil then
		local dirs = {}
		for _, line in ipairs(read_lines(carry .. "/overlays")) do
			table.insert(dirs, string.match(line, "^%S+ %S+ %S+ (.*)$"))
		end
		add_overlays(config, node_cache_path(user_id) .. "/" .. string.match(entry, "[^/]*$"), here, dirs)
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
	local owner = nil
	if user_id == 0 then
		owner = mapped_root(config)
	end
	if not run_on_nodes("copying the container", node_copy_command(carry, here, entry, user_id, owner), node_local .. " on a node") then
		return slurm.ERROR
	end
	slurm.set_bundle_path(here)
	slurm.set_root_path(here .. "/rootfs")
	return slurm.SUCCESS
end

-- scrun's own hook, which it calls (when a script has it) as the engine starts the
-- container, before its step is launched, with stage-in's arguments: what the engine wrote
-- to a carried file since stage-in reaches the copy the container gets, as through crun,
-- where the engine's file itself is bind-mounted. A directory stays as stage-in copied it.
-- Here the scratch's copy is written, then each node's copy from it (one command on the
-- nodes, only when a file changed).
function scrun_before_start(id, bundle, spool_dir, config_file, job_id, user_id, group_id, job_env)
	id = file_name(id)
	local carry, here = carried_path(id, user_id), node_path(id, user_id)
	local function copy_of(index)
		return string.format("%s/mounts/%d", carry, index)
	end
	local refreshed = refresh_carried_files(copy_of)
	if refreshed == nil then
		return slurm.ERROR
	end
	local command = ""
	for _, index in ipairs(refreshed) do
		local node_copy = string.format("%s/mounts/%d", here, index)
		command = command .. "cp -- " .. quote(copy_of(index)) .. " " .. quote(node_copy)
			.. " && touch -- " .. quote(node_copy .. ".since") .. " || exit 1\n"
	end
	if command ~= "" and not run_on_nodes("copying what the engine wrote since stage-in", command, node_local .. " on a node") then
		return slurm.ERROR
	end
	return slurm.SUCCESS
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path, spool_dir, config_file, job_id, user_id, group_id)
	id = file_name(id) -- what the paths below are named after
	local carry = carried_path(id, user_id)
	if bundle == orig_bundle then
		-- stage-in did not finish: nothing ran, nothing goes back; remove what it made
		-- (on the nodes too, where the copy may have stopped half way: best effort, as a job
		-- that has already ended runs no step)
		local here = node_path(id, user_id)
		-- (the copy itself may be a mapped root's, hand_over_command: its directory is checked)
		local _ = slurm.remote_command("(" .. private_dir_command(node_local, string.match(here, "^(.*)/"), false) .. ") && "
			.. with_user_ids(remove_command .. "remove " .. quote(here) .. "; rm -f -- " .. quote(node_cache_path(user_id)) .. "/*/users/" .. quote(id)))
		-- (exit 1 or 3: not the user's, or not there; nothing to remove)
		local rc, output = slurm.allocator_command(private_dir_command(scratch, carry, false)
			.. "\n" .. remove_command .. "remove " .. quote(carry) .. " && rm -f -- " .. quote(cache_path(user_id)) .. "/*/users/" .. quote(id) .. " || exit 4")
		if rc == 4 then
			slurm.log_error("removing the carried copy failed: %s", string.sub(output, 1, 300))
			return slurm.ERROR
		end
		return slurm.SUCCESS
	end
	-- the first node's copy is the container's task 0: what it wrote goes back (its writable
	-- layers, or the root filesystem when it changed anything there), with, beside each bind
	-- mount's copy, the list of what the container changed in it (only this node can tell,
	-- by its `.since`), and the copies themselves only when it changed something; every node
	-- removes its copy and its mark on its cached image
	local entry = read_lines(carry .. "/cache-entry")[1]
	local mounts = bundle .. "/mounts"
	local back = remove_command .. "if [ \"$SLURM_NODEID\" = 0 ] && [ -d " .. quote(bundle) .. " ]; then failed=\n"
		.. node_back_command(entry, bundle, root_path, carry, user_id, job_id)
		.. "[ -z \"$failed\" ] && " .. changed_lists_command(mounts)
		.. " && set -- " .. quote(mounts) .. "/*.changed && if [ -e \"$1\" ]; then\n"
		.. "\tany=\n\tfor c; do [ ! -s \"$c\" ] || any=1; done\n"
		.. "\tif [ -n \"$any\" ]; then rsync -a -H --modify-window=-1 --numeric-ids --delete -- " .. quote(mounts .. "/") .. " " .. quote(carry .. "/mounts/")
		.. "; else cp -- \"$@\" " .. quote(carry .. "/mounts/") .. "; fi\n"
		.. "fi; fi; s=$?; mv -T -- " .. quote(bundle) .. " " .. quote(bundle .. ".removing") .. " 2>/dev/null; remove "
		.. quote(bundle .. ".removing") .. "; rm -f -- " .. quote(node_cache_path(user_id)) .. "/*/users/" .. quote(id) .. "; exit $s"
	if not run_on_nodes("copying what the container wrote back", with_user_ids(back)) then
		-- (a job Slurm has ended runs no command: then the node's copy stays where it is)
		slurm.log_error("%s", "what the container wrote is kept in " .. carry .. ", or, if the job had ended, in "
			.. bundle .. " on its first node")
		return slurm.ERROR
	end
	local root_back = changes_back_command(entry, carry, carry .. "/rootfs", orig_root_path, id, job_id)
	local config = read_config(config_file)
	if config == nil then
		run("copying the root filesystem back", "failed=\n" .. root_back .. "[ -z \"$failed\" ]")
		slurm.log_error("%s", "cannot read " .. config_file .. ": the bind mounts' writes are left in " .. carry)
		return slurm.ERROR
	end
	-- one command: the root filesystem, then each bind mount that is not read-only, back;
	-- the carried copy removed when all went back (exit 2 if that alone failed), renamed
	-- first, as each node's copy is: a stage-out run again (`scrun delete`'s, after an
	-- anchor killed in this one) finds a whole copy or none, never one half removed, whose
	-- missing entries it would take for the container's deletions; finding none, it has
	-- nothing to do
	local removing = carry .. ".removing"
	local back_here = remove_command .. "if [ ! -d " .. quote(carry) .. " ]; then remove " .. quote(removing) .. "; exit 0; fi\n"
		.. "failed=\n" .. root_back
	for _, mount in ipairs(carried_mounts(config)) do
		if mount.writable then
			back_here = back_here .. carry_back_command(string.format("%s/mounts/%d", carry, mount.index), mount.source)
		end
	end
	back_here = back_here .. "[ -z \"$failed\" ] || exit 1\nmv -T -- " .. quote(carry) .. " " .. quote(removing)
		.. " && remove " .. quote(removing) .. " || exit 2"
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
