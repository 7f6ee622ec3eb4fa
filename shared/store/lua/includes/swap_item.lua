-- swap_item(keys, argv, kb, ab, leases, admissions, live): the keys (5 from kb: task, events,
-- owner_index, owner_live, queue) and values (11 from ab) of one compare-and-set item, as
-- swap_task takes them.
local function swap_item(keys, argv, kb, ab, leases, admissions, live)
  local k = {
    task = keys[kb], events = keys[kb + 1], owner_index = keys[kb + 2],
    owner_live = keys[kb + 3], queue = keys[kb + 4], leases = leases, admissions = admissions,
    live = live,
  }
  local a = {
    id = argv[ab], owner = argv[ab + 1], expected = argv[ab + 2], next = argv[ab + 3],
    result = argv[ab + 4], error = argv[ab + 5], holder = argv[ab + 6], epoch = argv[ab + 7],
    event = argv[ab + 8], data = argv[ab + 9], channel = argv[ab + 10],
  }
  return k, a
end
