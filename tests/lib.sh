# Helpers the test scripts share (sourced).

# json_field NAME: the last value of "NAME": in the JSON summaries read from standard input.
json_field() { grep -o "\"$1\":[-0-9.e+]*" | tail -n 1 | cut -d: -f2; }

# close_to A B REL: succeeds when |A - B| <= REL * |B|.
close_to() { awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; if (b < 0) b = -b; exit !(d <= r * b) }'; }
