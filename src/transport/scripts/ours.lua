-- A lock key's string value is its holder's token, alone or followed by a
-- NUL byte and the holder's label (for people; never compared).
local function ours(value, token)
  return value == token or (type(value) == 'string' and string.sub(value, 1, #token + 1) == token .. '\0')
end
local function labeled(token, label)
  if label == nil or label == '' then
    return token
  end
  return token .. '\0' .. label
end
