# Used by make soak (Makefile): which tests to run with more checks.
# Prints the Test functions of the _test.go files given that run a rapid
# property: their body calls rapid.Check, or calls a function of these
# files (not a method) that does, followed through up to three calls.
/^func / {
  f = ""
  if ($2 !~ /^\(/) { f = $2; sub(/\(.*/, "", f); sub(/\[.*/, "", f); order[++n] = f }
}
f != "" { body[f] = body[f] "\n" $0 }
/rapid\.Check\(/ && f != "" { rapid[f] = 1 }
/^}/ { f = "" }
END {
  for (round = 0; round < 3; round++)
    for (i = 1; i <= n; i++) {
      g = order[i]
      if (g in rapid) continue
      for (h in rapid)
        if (h != g && h !~ /^Test/ && match(body[g], "(^|[^A-Za-z0-9_.])" h "\\(")) { rapid[g] = 1; break }
    }
  for (i = 1; i <= n; i++) if (order[i] ~ /^Test/ && (order[i] in rapid)) print order[i]
}
