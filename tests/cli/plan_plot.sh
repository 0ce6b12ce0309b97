#!/bin/sh
# plan_plot.sh KVBENCH DIR - `kvbench plan --plot OUT` leaves OUT as it
# was when gnuplot fails (here a stand-in that, like gnuplot on a script
# error, creates the PNG it was told to write and exits 1): no data file,
# no empty PNG.  That is how docs/ came to hold stray plan_*.dat and
# empty plan_*.png beside docs/plan/.  With the real gnuplot, both PNGs
# are written and not empty.
set -eu
kvbench=$1
dir=$2
rm -rf "$dir"
mkdir -p "$dir/bin" "$dir/out"
cat >"$dir/bin/gnuplot" <<'GP'
#!/bin/sh
while IFS= read -r line; do
	case $line in
	"set output '"*) f=${line#"set output '"}; : >"${f%"'"}" ;;
	esac
done
echo "gnuplot stand-in: line 3: invalid command" >&2
exit 1
GP
chmod +x "$dir/bin/gnuplot"
if PATH="$dir/bin:$PATH" "$kvbench" plan --dir "$dir/store" --tokens 64 \
	--repeat 1 --plot "$dir/out" >/dev/null 2>"$dir/err"; then
	echo "kvbench plan succeeded although gnuplot failed"; exit 1
fi
grep -q "gnuplot failed" "$dir/err" || { cat "$dir/err"; exit 1; }
left=$(ls "$dir/out")
if [ -n "$left" ]; then
	echo "a failed plot left: $left"; exit 1
fi
if command -v gnuplot >/dev/null 2>&1; then
	"$kvbench" plan --dir "$dir/store" --tokens 64 --repeat 1 \
		--plot "$dir/out" >/dev/null 2>"$dir/err" || { cat "$dir/err"; exit 1; }
	for p in plan_kvpr.png plan_xcache.png; do
		[ -s "$dir/out/$p" ] || { echo "$p missing or empty"; exit 1; }
	done
fi
rm -rf "$dir"
echo "plot-ok"
