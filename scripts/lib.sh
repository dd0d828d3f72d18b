# Shell functions shared by scripts/test and scripts/demo (sourced from the repository root).

say() { echo "scripts/${0##*/}: $*" >&2; }
die() { say "$*"; exit 2; }

# --- the interpreter -------------------------------------------------------------------------

# Prints the real executable of a Python command that runs and is 3.11 or newer.
python_exe() {
    "$@" -c 'import os, sys; assert sys.version_info >= (3, 11); print(os.path.realpath(sys.executable))' 2>/dev/null
}

find_python() {  # find_python 3.12
    local want=$1 cmd="python$1" version candidate
    python_exe "$cmd" && return
    # A pyenv shim refuses a version that is not selected; select it for this one command.
    if command -v pyenv >/dev/null 2>&1; then
        version=$(pyenv versions --bare 2>/dev/null | grep -v / | grep -E "^${want//./\\.}(\.|$)" | sort -V | tail -n 1 || true)
        if [ -n "$version" ]; then
            PYENV_VERSION=$version python_exe "$cmd" && return
        fi
        for candidate in "$(pyenv root)"/versions/"$want"*/bin/"$cmd"; do
            [ -x "$candidate" ] && python_exe "$candidate" && return
        done
    fi
    return 1
}

# choose_python WANT: sets $python and $python_version. WANT is a version such as 3.12, a path,
# or empty for python3 when it is 3.11 or newer (else the newest 3.11+ found).
choose_python() {
    local python_want=$1
    if [ -z "$python_want" ]; then
        python=$(python_exe python3) || python=$(find_python 3.13) || python=$(find_python 3.12) ||
            python=$(find_python 3.11) || die "no Python 3.11 or newer found (python3 is older); install one or pass --python"
    elif [[ $python_want == */* ]]; then
        python=$(python_exe "$python_want") || die "$python_want does not run or is older than 3.11"
    else
        [[ $python_want =~ ^3\.[0-9]+$ ]] || die "--python takes a version such as 3.12 (or a path), not '$python_want'"
        python=$(find_python "$python_want") ||
            die "python$python_want not found (tried PATH, pyenv versions, \$(pyenv root)/versions), or it is older than 3.11"
    fi
    python_version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
}

# --- the virtualenv --------------------------------------------------------------------------

# prepare_venv VENV EXTRA [REQUIREMENT]: sets $vpy to the virtualenv's python, after creating it
# with $python and installing django-durajobs[EXTRA] (and REQUIREMENT, such as a Django series)
# unless pyproject.toml and REQUIREMENT are unchanged since the last install. Holds a lock on the
# virtualenv (file descriptor 9) until release_venv, so two runs never build it at once.
prepare_venv() {
    local venv=$1 extra=$2 requirement=${3:-} stamp
    vpy="$venv/bin/python"
    mkdir -p "$(dirname "$venv")"
    exec 9>"$venv.lock"
    flock 9

    stamp=$( { cat pyproject.toml; echo "$requirement"; } | sha256sum | cut -d' ' -f1)
    if [ -e "$venv" ] && { ! "$vpy" -c '' >/dev/null 2>&1 || [ "$(cat "$venv/.base-python" 2>/dev/null)" != "$python" ]; }; then
        say "removing $venv: it is broken or was made with another interpreter"
        rm -rf "$venv"
    fi
    if [ ! -e "$vpy" ]; then
        say "creating $venv ($python)"
        "$python" -m venv "$venv" ||
            die "could not create a virtualenv with $python (on Debian: apt-get install python3-venv)"
        echo "$python" >"$venv/.base-python"
    fi
    if [ "$(cat "$venv/.install-stamp" 2>/dev/null)" != "$stamp" ]; then
        say "installing django-durajobs[$extra] ${requirement:-Django (pyproject range)} into $venv"
        rm -f "$venv/.install-stamp"
        "$vpy" -m pip install -q -e ".[$extra]" ${requirement:+"$requirement"} || die "pip install failed"
        echo "$stamp" >"$venv/.install-stamp"
    fi
}

release_venv() { exec 9>&-; }

# The database driver DATABASE_URL needs, as the pyproject extra names it.
extra_requirements() {
    "$vpy" -c 'import sys, tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"][sys.argv[1]]))' "$1"
}

# install_database_driver: installs into $vpy the driver DATABASE_URL needs (none for SQLite).
install_database_driver() {
    local database_url=${DATABASE_URL:-} reqs
    case "${database_url%%:*}" in
        postgres|postgresql|pgsql|postgis)
            if ! "$vpy" -c 'import psycopg' >/dev/null 2>&1; then
                say "installing the PostgreSQL driver"
                mapfile -t reqs < <(extra_requirements postgres)
                "$vpy" -m pip install -q "${reqs[@]}" || die "pip could not install ${reqs[*]}"
            fi ;;
        mysql|mysql2|mysqlgis)
            if ! "$vpy" -c 'import MySQLdb' >/dev/null 2>&1; then
                say "installing the MySQL/MariaDB driver (it compiles against the client library)"
                mapfile -t reqs < <(extra_requirements mysql)
                if ! "$vpy" -m pip install -q "${reqs[@]}"; then
                    if ! { pkg-config --exists mysqlclient || pkg-config --exists mariadb || pkg-config --exists libmariadb; } 2>/dev/null; then
                        say "mysqlclient could not be built: the MySQL/MariaDB client headers or pkg-config are missing."
                        say "On Debian/Ubuntu install them with:  apt-get install libmariadb-dev pkg-config"
                        exit 2
                    fi
                    die "pip could not install ${reqs[*]}"
                fi
            fi ;;
        ""|sqlite) ;;
        *) say "note: no driver installed for DATABASE_URL scheme '${database_url%%:*}'" ;;
    esac
}
