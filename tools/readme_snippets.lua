-- tools/readme_snippets.lua README.md OUTDIR: write every ```sh block of README.md, in order,
-- to OUTDIR/01.sh, OUTDIR/02.sh, ... (indentation of list-item fences removed) and print the
-- number written. tests/readme_check.sh runs them. A block right after a line
-- `<!-- readme_check: skip ... -->` is not written (the quick start: it runs the whole suite).
local readme, outdir = arg[1], arg[2]
assert(readme and outdir, "usage: lua5.4 tools/readme_snippets.lua README.md OUTDIR")
local f = assert(io.open(readme, "r"))
local count, lines, indent, lineno, first, skip = 0, nil, nil, 0, nil, false
for line in f:lines() do
  lineno = lineno + 1
  if lines then
    if line:match("^%s*```%s*$") and skip then
      lines, skip = nil, false
    elseif line:match("^%s*```%s*$") then
      count = count + 1
      local out = assert(io.open(string.format("%s/%02d.sh", outdir, count), "w"))
      out:write(string.format("# README.md line %d\n", first), table.concat(lines, "\n"), "\n")
      out:close()
      lines = nil
    else
      -- strip the fence's own indentation (a snippet inside a list item)
      if line:sub(1, #indent) == indent then line = line:sub(#indent + 1) end
      lines[#lines + 1] = line
    end
  else
    local ind = line:match("^(%s*)```sh%s*$")
    if ind then lines, indent, first = {}, ind, lineno + 1
    elseif line:match("^%s*<!%-%- readme_check: skip") then skip = true
    elseif line:match("%S") then skip = false end
  end
end
f:close()
assert(not lines, "README.md: a ```sh block is not closed")
print(count)
