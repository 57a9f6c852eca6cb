-- bench/upstream-to-json.lua: put before the cluster's scrun.lua in the copy bench/upstream.sh
-- gives upstream scrun. Slurm 26.05.5's slurm.to_json, as Debian 14 builds it (Lua 5.1), fails
-- with "invalid key to 'next'" on every table that holds an array, so no OCI config (args,
-- env, mounts are arrays) can be written back with it. Where it fails on { 1 }, this replaces
-- it with an encoder in Lua 5.1: a table whose keys are exactly 1..n is an array, any other
-- table an object ({} for an empty one); numbers with no fraction are written as integers.
-- Where slurm.to_json works (our scrun), nothing changes.
if not pcall(slurm.to_json, { 1 }) then
	local escapes = {
		['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f",
		["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t",
	}
	local function escape(c)
		return escapes[c] or string.format("\\u%04x", string.byte(c))
	end
	local function array_length(t)
		local count = 0
		for _ in pairs(t) do
			count = count + 1
		end
		if count > 0 and count == #t then
			return count
		end
		return nil
	end
	local function encode(value, out)
		local kind = type(value)
		if kind == "string" then
			out[#out + 1] = '"' .. string.gsub(value, '[%c"\\]', escape) .. '"'
		elseif kind == "number" then
			if value == math.floor(value) and math.abs(value) < 2 ^ 53 then
				out[#out + 1] = string.format("%.0f", value)
			else
				out[#out + 1] = string.format("%.17g", value)
			end
		elseif kind == "boolean" then
			out[#out + 1] = tostring(value)
		elseif kind == "table" then
			local n = array_length(value)
			if n then
				out[#out + 1] = "["
				for i = 1, n do
					if i > 1 then
						out[#out + 1] = ","
					end
					encode(value[i], out)
				end
				out[#out + 1] = "]"
			else
				out[#out + 1] = "{"
				local first = true
				for key, item in pairs(value) do
					if not first then
						out[#out + 1] = ","
					end
					first = false
					encode(tostring(key), out)
					out[#out + 1] = ":"
					encode(item, out)
				end
				out[#out + 1] = "}"
			end
		else
			out[#out + 1] = "null"
		end
	end
	slurm.to_json = function(value)
		local out = {}
		encode(value, out)
		return table.concat(out)
	end
end
